// Linear layer: argument checks and dispatch.
#include "ops/linear.h"

#include "ops/dispatch.h"

namespace ftune {

void linear_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  const char* op = "linear_forward";
  if (weight.rank() != 2)
    throw ShapeError("linear_forward: weight must be 2-D, got " + weight.describe());
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rank() == 2 ? inp.dim(0) : -1;
  check_f32(op, "weight", weight, Shape{OC, C});
  const int64_t ldi = row_stride(op, "inp", inp, N, C);
  const int64_t ldo = row_stride(op, "out", out, N, OC);
  if (bias.defined()) check_f32(op, "bias", bias, Shape{OC});
  const Device dev = common_device(op, {out, inp, weight, bias});
  FTUNE_DISPATCH(op, dev,
                 cpu::linear_forward(out.data_as<float>(), ldo, inp.data_as<float>(), ldi,
                                     weight.data_as<float>(),
                                     bias.defined() ? bias.data_as<float>() : nullptr, N, C, OC),
                 cuda::linear_forward(out.data_as<float>(), ldo, inp.data_as<float>(), ldi,
                                      weight.data_as<float>(),
                                      bias.defined() ? bias.data_as<float>() : nullptr, N, C, OC));
}

void linear_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight, bool accumulate_dinp) {
  const char* op = "linear_backward";
  if (weight.rank() != 2)
    throw ShapeError("linear_backward: weight must be 2-D, got " + weight.describe());
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rank() == 2 ? inp.dim(0) : -1;
  check_f32(op, "weight", weight, Shape{OC, C});
  const int64_t ldi = row_stride(op, "inp", inp, N, C);
  const int64_t lddo = row_stride(op, "dout", dout, N, OC);
  const int64_t lddi = dinp.defined() ? row_stride(op, "dinp", dinp, N, C) : C;
  if (dweight.defined()) check_f32(op, "dweight", dweight, Shape{OC, C});
  if (dbias.defined()) check_f32(op, "dbias", dbias, Shape{OC});
  const Device dev = common_device(op, {dinp, dweight, dbias, dout, inp, weight});
  FTUNE_DISPATCH(op, dev,
                 cpu::linear_backward(dinp.defined() ? dinp.data_as<float>() : nullptr, lddi,
                                      dweight.defined() ? dweight.data_as<float>() : nullptr,
                                      dbias.defined() ? dbias.data_as<float>() : nullptr,
                                      dout.data_as<float>(), lddo, inp.data_as<float>(), ldi,
                                      weight.data_as<float>(), N, C, OC, accumulate_dinp),
                 cuda::linear_backward(dinp.defined() ? dinp.data_as<float>() : nullptr, lddi,
                                       dweight.defined() ? dweight.data_as<float>() : nullptr,
                                       dbias.defined() ? dbias.data_as<float>() : nullptr,
                                       dout.data_as<float>(), lddo, inp.data_as<float>(), ldi,
                                       weight.data_as<float>(), N, C, OC, accumulate_dinp));
}

}  // namespace ftune
