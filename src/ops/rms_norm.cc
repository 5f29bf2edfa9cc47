// RMSNorm: argument checks and dispatch (ops/rms_norm.h).
#include "ops/rms_norm.h"

#include "core/thread_pool.h"
#include "ops/dispatch.h"

namespace ftune {
namespace {

RmsNormRows rows_of(const char* op, const TensorView& inp, const TensorView& weight,
                    int64_t heads) {
  if (inp.rank() != 2)
    throw ShapeError(fmt::format("{}: inp must be (rows, heads x C), got {}", op, inp.describe()));
  if (heads <= 0 || inp.dim(1) % heads != 0)
    throw ShapeError(fmt::format("{}: {} columns do not split into {} heads", op, inp.dim(1), heads));
  RmsNormRows r;
  r.N = inp.dim(0);
  r.heads = heads;
  r.C = inp.dim(1) / heads;
  check_f32(op, "weight", weight, Shape{r.C});
  return r;
}

void check_offset(const char* op, float offset) {
  if (offset != 0.0f && offset != 1.0f)
    throw ShapeError(fmt::format("{}: offset {} (0: weight, 1: 1 + weight)", op, offset));
}

}  // namespace

int64_t rms_norm_backward_workspace(Device device, int64_t C) {
  return device.is_cpu() ? static_cast<int64_t>(compute_threads()) * C : 0;
}

void rms_norm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                      float eps, float offset, int64_t heads) {
  const char* op = "rms_norm_forward";
  check_offset(op, offset);
  const RmsNormRows r = rows_of(op, inp, weight, heads);
  const int64_t ldi = row_stride(op, "inp", inp, r.N, r.heads * r.C);
  const int64_t ldo = row_stride(op, "out", out, r.N, r.heads * r.C);
  check_f32(op, "rstd", rstd, Shape{r.N * r.heads});
  const Device dev = common_device(op, {out, rstd, inp, weight});
  FTUNE_DISPATCH(op, dev,
                 cpu::rms_norm_forward(out.data_as<float>(), ldo, rstd.data_as<float>(),
                                       inp.data_as<float>(), ldi, weight.data_as<float>(), r, eps,
                                       offset),
                 cuda::rms_norm_forward(out.data_as<float>(), ldo, rstd.data_as<float>(),
                                        inp.data_as<float>(), ldi, weight.data_as<float>(), r, eps,
                                        offset));
}

void rms_norm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                       TensorView weight, TensorView rstd, float offset, TensorView workspace,
                       int64_t heads) {
  const char* op = "rms_norm_backward";
  check_offset(op, offset);
  const RmsNormRows r = rows_of(op, inp, weight, heads);
  const int64_t ldi = row_stride(op, "inp", inp, r.N, r.heads * r.C);
  const int64_t lddi = row_stride(op, "dinp", dinp, r.N, r.heads * r.C);
  const int64_t lddo = row_stride(op, "dout", dout, r.N, r.heads * r.C);
  check_f32(op, "rstd", rstd, Shape{r.N * r.heads});
  if (dweight.defined()) check_f32(op, "dweight", dweight, Shape{r.C});
  const Device dev = common_device(op, {dinp, dweight, dout, inp, weight, rstd});
  float* dw = dweight.defined() ? dweight.data_as<float>() : nullptr;
  FTUNE_DISPATCH(
      op, dev,
      {
        if (dw && workspace.numel() < rms_norm_backward_workspace(dev, r.C))
          throw ShapeError(fmt::format("{}: workspace of {} floats, needs {}", op,
                                       workspace.numel(), rms_norm_backward_workspace(dev, r.C)));
        cpu::rms_norm_backward(dinp.data_as<float>(), lddi, dw, dout.data_as<float>(), lddo,
                               inp.data_as<float>(), ldi, weight.data_as<float>(),
                               rstd.data_as<float>(), r, offset,
                               dw ? workspace.data_as<float>() : nullptr);
      },
      cuda::rms_norm_backward(dinp.data_as<float>(), lddi, dw, dout.data_as<float>(), lddo,
                              inp.data_as<float>(), ldi, weight.data_as<float>(),
                              rstd.data_as<float>(), r, offset));
}

}  // namespace ftune
