// The fused dropout + residual + layer norm: argument checks and dispatch.
#include "ops/dropout_add_norm.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void check_p(const char* op, float p) {
  if (!(p >= 0.0f && p < 1.0f)) throw ShapeError(fmt::format("{}: p = {} outside [0, 1)", op, p));
}

// (N, C) of a 2-D-or-more f32 tensor; the per-row / per-channel vectors checked against it.
void check_norm_args(const char* op, const TensorView& x, const TensorView& mean,
                     const TensorView& rstd, const TensorView& weight, int64_t* N, int64_t* C) {
  if (x.rank() < 1) throw ShapeError(fmt::format("{}: input must have rank >= 1", op));
  *C = x.dim(-1);
  *N = x.numel() / std::max<int64_t>(*C, 1);
  check_f32(op, "mean", mean, Shape{*N});
  check_f32(op, "rstd", rstd, Shape{*N});
  check_f32(op, "weight", weight, Shape{*C});
}

}  // namespace

void dropout_add_layer_norm_forward(TensorView out, TensorView out_h, TensorView sum,
                                    TensorView mean, TensorView rstd, TensorView a, TensorView b,
                                    TensorView weight, TensorView bias, float eps, float p,
                                    RngKey rng, const DropoutRows& rows) {
  const char* op = "dropout_add_layer_norm_forward";
  check_float(op, "a", a, b.shape);
  check_f32(op, "b", b, b.shape);
  check_f32(op, "sum", sum, b.shape);
  check_f32(op, "out", out, b.shape);
  int64_t N = 0, C = 0;
  check_norm_args(op, b, mean, rstd, weight, &N, &C);
  check_f32(op, "bias", bias, Shape{C});
  check_p(op, p);
  bf16_t* out_bf16 = nullptr;
  f16_t* out_f16 = nullptr;
  if (out_h.defined()) {
    if ((out_h.dtype != DType::BF16 && out_h.dtype != DType::F16) || out_h.shape != b.shape ||
        !out_h.is_contiguous())
      throw ShapeError(fmt::format("{}: out_h must be a contiguous bf16 or f16 tensor of shape {}, "
                                   "got {}",
                                   op, b.describe(), out_h.describe()));
    if (out_h.dtype == DType::BF16)
      out_bf16 = out_h.data_as<bf16_t>();
    else
      out_f16 = out_h.data_as<f16_t>();
  }
  if (N * C == 0) return;
  const DropoutRuns runs = dropout_runs(op, rows, N * C, C);
  const Device dev = common_device(op, {out, out_h, sum, mean, rstd, a, b, weight, bias});
  FTUNE_DISPATCH(op, dev,
                 cpu::dropout_add_layer_norm_forward(
                     out.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(), a.data,
                     a.dtype, b.data_as<float>(), sum.data_as<float>(), weight.data_as<float>(),
                     bias.data_as<float>(), N, C, eps, out_bf16, out_f16, p, rng, runs),
                 cuda::dropout_add_layer_norm_forward(
                     out.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>(), a.data,
                     a.dtype, b.data_as<float>(), sum.data_as<float>(), weight.data_as<float>(),
                     bias.data_as<float>(), N, C, eps, out_bf16, out_f16, p, rng, runs));
}

void layer_norm_dropout_backward(TensorView dinp, TensorView ddrop, TensorView dweight,
                                 TensorView dbias, TensorView dout, TensorView inp,
                                 TensorView weight, TensorView mean, TensorView rstd, float p,
                                 RngKey rng, const DropoutRows& rows) {
  const char* op = "layer_norm_dropout_backward";
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "dout", dout, inp.shape);
  check_f32(op, "dinp", dinp, inp.shape);
  check_float(op, "ddrop", ddrop, inp.shape);
  if (ddrop.data == dinp.data)
    throw ShapeError(fmt::format("{}: ddrop aliases dinp (both are written)", op));
  int64_t N = 0, C = 0;
  check_norm_args(op, inp, mean, rstd, weight, &N, &C);
  // Frozen LayerNorms (adapters) pass undefined dweight and dbias: only the input gradients.
  if (dweight.defined() != dbias.defined())
    throw ShapeError(fmt::format("{}: dweight and dbias must both be given or both omitted", op));
  if (dweight.defined()) {
    check_f32(op, "dweight", dweight, Shape{C});
    check_f32(op, "dbias", dbias, Shape{C});
  }
  check_p(op, p);
  if (N * C == 0) return;
  const DropoutRuns runs = dropout_runs(op, rows, N * C, C);
  const Device dev =
      common_device(op, {dinp, ddrop, dweight, dbias, dout, inp, weight, mean, rstd});
  float* dw = dweight.defined() ? dweight.data_as<float>() : nullptr;
  float* db = dbias.defined() ? dbias.data_as<float>() : nullptr;
  FTUNE_DISPATCH(op, dev,
                 cpu::layer_norm_dropout_backward(
                     dinp.data_as<float>(), ddrop.data, ddrop.dtype, dw, db, dout.data_as<float>(),
                     inp.data_as<float>(), weight.data_as<float>(), mean.data_as<float>(),
                     rstd.data_as<float>(), N, C, p, rng, runs),
                 cuda::layer_norm_dropout_backward(
                     dinp.data_as<float>(), ddrop.data, ddrop.dtype, dw, db, dout.data_as<float>(),
                     inp.data_as<float>(), weight.data_as<float>(), mean.data_as<float>(),
                     rstd.data_as<float>(), N, C, p, rng, runs));
}

}  // namespace ftune
