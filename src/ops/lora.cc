// LoRA / DoRA ops: argument checks and dispatch (see lora.h for the math).
#include "ops/lora.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

struct LoraDims {
  int64_t N, C, OC, r;
};

LoraDims lora_dims(const char* op, const TensorView& inp, const TensorView& a,
                   const TensorView& b) {
  if (a.rank() != 2 || b.rank() != 2)
    throw ShapeError(
        fmt::format("{}: A and B must be 2-D, got {} and {}", op, a.describe(), b.describe()));
  const int64_t r = a.dim(0), C = a.dim(1), OC = b.dim(0);
  check_f32(op, "A", a, Shape{r, C});
  check_f32(op, "B", b, Shape{OC, r});
  if (inp.rank() != 2) throw ShapeError(fmt::format("{}: inp must be 2-D", op));
  return {inp.dim(0), C, OC, r};
}

DropoutRuns check_dropout(const char* op, const LoraDropout& d, const TensorView& inp, int64_t ldi,
                          int64_t N, int64_t C) {
  if (d.p < 0.0f || d.p >= 1.0f)
    throw ShapeError(fmt::format("{}: dropout rate {} outside [0, 1)", op, d.p));
  if (d.p == 0.0f) return DropoutRuns{};
  if (ldi != C) throw ShapeError(fmt::format("{}: inp must be contiguous with dropout", op));
  if (!d.scratch.defined() || d.scratch.numel() < N * C)
    throw ShapeError(fmt::format("{}: dropout needs a scratch of {} floats", op, N * C));
  check_dtype(op, "scratch", d.scratch, DType::F32);
  (void)inp;
  return dropout_runs(op, d.rows, N * C, C);
}

float* data_or_null(const TensorView& v) {
  return v.defined() ? v.data_as<float>() : nullptr;
}

// The shared checks of the DoRA output ops: y (N, OC) and z row-strided, m and n (OC); returns
// the strides of y and z.
struct DoraOutputDims {
  int64_t N, OC, ldy, ldz;
};
DoraOutputDims dora_output_dims(const char* op, const char* y_name, const TensorView& y,
                                const TensorView& z, const TensorView& magnitude,
                                const TensorView& norm, const TensorView& dmagnitude) {
  if (y.rank() != 2) throw ShapeError(fmt::format("{}: {} must be 2-D", op, y_name));
  const int64_t N = y.dim(0), OC = y.dim(1);
  const int64_t ldy = row_stride(op, y_name, y, N, OC), ldz = row_stride(op, "z", z, N, OC);
  if (dmagnitude.defined()) check_f32(op, "dmagnitude", dmagnitude, Shape{OC});
  check_f32(op, "magnitude", magnitude, Shape{OC});
  check_f32(op, "norm", norm, Shape{OC});
  return {N, OC, ldy, ldz};
}

}  // namespace

void lora_forward(TensorView out, TensorView u, TensorView inp, TensorView a, TensorView b,
                  float scale, const LoraDropout& dropout) {
  const char* op = "lora_forward";
  const LoraDims d = lora_dims(op, inp, a, b);
  const int64_t ldi = row_stride(op, "inp", inp, d.N, d.C);
  const int64_t ldo = row_stride(op, "out", out, d.N, d.OC);
  check_f32(op, "u", u, Shape{d.N, d.r});
  const DropoutRuns runs = check_dropout(op, dropout, inp, ldi, d.N, d.C);
  const Device dev = common_device(op, {out, u, inp, a, b, dropout.scratch});
  FTUNE_DISPATCH(
      op, dev,
      cpu::lora_forward(out.data_as<float>(), ldo, u.data_as<float>(), inp.data_as<float>(), ldi,
                        a.data_as<float>(), b.data_as<float>(), d.N, d.C, d.OC, d.r, scale,
                        dropout.p, dropout.rng, runs, data_or_null(dropout.scratch)),
      cuda::lora_forward(out.data_as<float>(), ldo, u.data_as<float>(), inp.data_as<float>(), ldi,
                         a.data_as<float>(), b.data_as<float>(), d.N, d.C, d.OC, d.r, scale,
                         dropout.p, dropout.rng, runs, data_or_null(dropout.scratch)));
}

void lora_backward(TensorView dinp, TensorView da, TensorView db, TensorView h, TensorView dout,
                   TensorView inp, TensorView u, TensorView a, TensorView b, float scale,
                   bool accumulate_dinp, const LoraDropout& dropout) {
  const char* op = "lora_backward";
  const LoraDims d = lora_dims(op, inp, a, b);
  const int64_t ldi = row_stride(op, "inp", inp, d.N, d.C);
  const int64_t lddo = row_stride(op, "dout", dout, d.N, d.OC);
  const int64_t lddi = dinp.defined() ? row_stride(op, "dinp", dinp, d.N, d.C) : d.C;
  check_f32(op, "u", u, Shape{d.N, d.r});
  check_f32(op, "h", h, Shape{d.N, d.r});
  if (da.defined()) check_f32(op, "dA", da, a.shape);
  if (db.defined()) check_f32(op, "dB", db, b.shape);
  const DropoutRuns runs = check_dropout(op, dropout, inp, ldi, d.N, d.C);
  const Device dev = common_device(op, {dinp, da, db, h, dout, inp, u, a, b, dropout.scratch});
  FTUNE_DISPATCH(
      op, dev,
      cpu::lora_backward(data_or_null(dinp), lddi, data_or_null(da), data_or_null(db),
                         h.data_as<float>(), dout.data_as<float>(), lddo, inp.data_as<float>(), ldi,
                         u.data_as<float>(), a.data_as<float>(), b.data_as<float>(), d.N, d.C, d.OC,
                         d.r, scale, accumulate_dinp, dropout.p, dropout.rng, runs,
                         data_or_null(dropout.scratch)),
      cuda::lora_backward(data_or_null(dinp), lddi, data_or_null(da), data_or_null(db),
                          h.data_as<float>(), dout.data_as<float>(), lddo, inp.data_as<float>(),
                          ldi, u.data_as<float>(), a.data_as<float>(), b.data_as<float>(), d.N, d.C,
                          d.OC, d.r, scale, accumulate_dinp, dropout.p, dropout.rng, runs,
                          data_or_null(dropout.scratch)));
}

void row_sq_norms(TensorView wsq, TensorView w) {
  const char* op = "row_sq_norms";
  if (w.rank() != 2) throw ShapeError("row_sq_norms: weight must be 2-D, got " + w.describe());
  check_f32(op, "weight", w, w.shape);
  check_f32(op, "wsq", wsq, Shape{w.dim(0)});
  const Device dev = common_device(op, {wsq, w});
  FTUNE_DISPATCH(op, dev,
                 cpu::row_sq_norms(wsq.data_as<float>(), w.data_as<float>(), w.dim(0), w.dim(1)),
                 cuda::row_sq_norms(wsq.data_as<float>(), w.data_as<float>(), w.dim(0), w.dim(1)));
}

int64_t dora_norms_workspace(int64_t OC, int64_t r) {
  return OC * r + r * r;
}

void dora_norms(TensorView norm, TensorView wsq, TensorView w, TensorView a, TensorView b,
                float scale, TensorView workspace) {
  const char* op = "dora_norms";
  if (w.rank() != 2) throw ShapeError("dora_norms: weight must be 2-D, got " + w.describe());
  const int64_t OC = w.dim(0), C = w.dim(1), r = a.rank() == 2 ? a.dim(0) : -1;
  check_f32(op, "weight", w, w.shape);
  check_f32(op, "A", a, Shape{r, C});
  check_f32(op, "B", b, Shape{OC, r});
  check_f32(op, "wsq", wsq, Shape{OC});
  check_f32(op, "norm", norm, Shape{OC});
  check_dtype(op, "workspace", workspace, DType::F32);
  if (workspace.numel() < dora_norms_workspace(OC, r))
    throw ShapeError(fmt::format("{}: workspace of {} floats, needs {}", op, workspace.numel(),
                                 dora_norms_workspace(OC, r)));
  const Device dev = common_device(op, {norm, wsq, w, a, b, workspace});
  FTUNE_DISPATCH(op, dev,
                 cpu::dora_norms(norm.data_as<float>(), wsq.data_as<float>(), w.data_as<float>(),
                                 a.data_as<float>(), b.data_as<float>(), OC, C, r, scale,
                                 workspace.data_as<float>()),
                 cuda::dora_norms(norm.data_as<float>(), wsq.data_as<float>(), w.data_as<float>(),
                                  a.data_as<float>(), b.data_as<float>(), OC, C, r, scale,
                                  workspace.data_as<float>()));
}

void dora_strip_bias(TensorView z, TensorView out, TensorView bias) {
  const char* op = "dora_strip_bias";
  if (out.rank() != 2) throw ShapeError("dora_strip_bias: out must be 2-D");
  const int64_t N = out.dim(0), OC = out.dim(1);
  const int64_t ldo = row_stride(op, "out", out, N, OC), ldz = row_stride(op, "z", z, N, OC);
  if (bias.defined()) check_f32(op, "bias", bias, Shape{OC});
  const Device dev = common_device(op, {z, out, bias});
  FTUNE_DISPATCH(op, dev,
                 cpu::dora_strip_bias(z.data_as<float>(), ldz, out.data_as<float>(), ldo,
                                      data_or_null(bias), N, OC),
                 cuda::dora_strip_bias(z.data_as<float>(), ldz, out.data_as<float>(), ldo,
                                       data_or_null(bias), N, OC));
}

void dora_output_forward(TensorView out, TensorView z, TensorView bias, TensorView magnitude,
                         TensorView norm) {
  const char* op = "dora_output_forward";
  const auto [N, OC, ldo, ldz] = dora_output_dims(op, "out", out, z, magnitude, norm, {});
  if (bias.defined()) check_f32(op, "bias", bias, Shape{OC});
  const Device dev = common_device(op, {out, z, bias, magnitude, norm});
  FTUNE_DISPATCH(op, dev,
                 cpu::dora_output_forward(out.data_as<float>(), ldo, z.data_as<float>(), ldz,
                                          data_or_null(bias), magnitude.data_as<float>(),
                                          norm.data_as<float>(), N, OC),
                 cuda::dora_output_forward(out.data_as<float>(), ldo, z.data_as<float>(), ldz,
                                           data_or_null(bias), magnitude.data_as<float>(),
                                           norm.data_as<float>(), N, OC));
}

void dora_output_backward(TensorView dmagnitude, TensorView dout, TensorView z,
                          TensorView magnitude, TensorView norm) {
  const char* op = "dora_output_backward";
  const auto [N, OC, lddo, ldz] = dora_output_dims(op, "dout", dout, z, magnitude, norm, dmagnitude);
  const Device dev = common_device(op, {dmagnitude, dout, z, magnitude, norm});
  FTUNE_DISPATCH(op, dev,
                 cpu::dora_output_backward(data_or_null(dmagnitude), dout.data_as<float>(), lddo,
                                           z.data_as<float>(), ldz, magnitude.data_as<float>(),
                                           norm.data_as<float>(), N, OC),
                 cuda::dora_output_backward(data_or_null(dmagnitude), dout.data_as<float>(), lddo,
                                            z.data_as<float>(), ldz, magnitude.data_as<float>(),
                                            norm.data_as<float>(), N, OC));
}

void dora_dropout_output_forward(TensorView out, TensorView z, TensorView magnitude,
                                 TensorView norm) {
  const char* op = "dora_dropout_output_forward";
  const auto [N, OC, ldo, ldz] = dora_output_dims(op, "out", out, z, magnitude, norm, {});
  const Device dev = common_device(op, {out, z, magnitude, norm});
  FTUNE_DISPATCH(op, dev,
                 cpu::dora_dropout_output_forward(out.data_as<float>(), ldo, z.data_as<float>(),
                                                  ldz, magnitude.data_as<float>(),
                                                  norm.data_as<float>(), N, OC),
                 cuda::dora_dropout_output_forward(out.data_as<float>(), ldo, z.data_as<float>(),
                                                   ldz, magnitude.data_as<float>(),
                                                   norm.data_as<float>(), N, OC));
}

void dora_dropout_output_backward(TensorView dmagnitude, TensorView z, TensorView dout,
                                  TensorView magnitude, TensorView norm) {
  const char* op = "dora_dropout_output_backward";
  const auto [N, OC, lddo, ldz] = dora_output_dims(op, "dout", dout, z, magnitude, norm, dmagnitude);
  const Device dev = common_device(op, {dmagnitude, z, dout, magnitude, norm});
  FTUNE_DISPATCH(op, dev,
                 cpu::dora_dropout_output_backward(data_or_null(dmagnitude), z.data_as<float>(),
                                                   ldz, dout.data_as<float>(), lddo,
                                                   magnitude.data_as<float>(),
                                                   norm.data_as<float>(), N, OC),
                 cuda::dora_dropout_output_backward(data_or_null(dmagnitude), z.data_as<float>(),
                                                    ldz, dout.data_as<float>(), lddo,
                                                    magnitude.data_as<float>(),
                                                    norm.data_as<float>(), N, OC));
}

}  // namespace ftune
