// Dropout: argument checks and dispatch. Forward and backward apply the same scaled mask.
#include "ops/dropout.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void dropout_apply(const char* op, TensorView out, TensorView inp, float p, RngKey rng) {
  check_f32(op, "inp", inp, inp.shape);
  check_f32(op, "out", out, inp.shape);
  if (!(p >= 0.0f && p < 1.0f)) throw ShapeError(fmt::format("{}: p = {} outside [0, 1)", op, p));
  const Device dev = common_device(op, {out, inp});
  FTUNE_DISPATCH(
      op, dev, cpu::dropout_apply(out.data_as<float>(), inp.data_as<float>(), inp.numel(), p, rng),
      cuda::dropout_apply(out.data_as<float>(), inp.data_as<float>(), inp.numel(), p, rng));
}

}  // namespace

void dropout_forward(TensorView out, TensorView inp, float p, RngKey rng) {
  dropout_apply("dropout_forward", out, inp, p, rng);
}

void dropout_backward(TensorView dinp, TensorView dout, float p, RngKey rng) {
  dropout_apply("dropout_backward", dinp, dout, p, rng);
}

}  // namespace ftune
