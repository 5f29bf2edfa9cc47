// First-token selection: argument checks and dispatch.
#include "ops/first_token.h"

#include "ops/dispatch.h"

namespace ftune {

void first_token_forward(TensorView out, TensorView hidden) {
  const char* op = "first_token_forward";
  if (hidden.rank() != 3)
    throw ShapeError("first_token_forward: hidden must be (B, T, C), got " + hidden.describe());
  const int64_t B = hidden.dim(0), T = hidden.dim(1), C = hidden.dim(2);
  check_f32(op, "hidden", hidden, hidden.shape);
  check_f32(op, "out", out, Shape{B, C});
  const Device dev = common_device(op, {out, hidden});
  FTUNE_DISPATCH(op, dev,
                 cpu::first_token_forward(out.data_as<float>(), hidden.data_as<float>(), B, T, C),
                 cuda::first_token_forward(out.data_as<float>(), hidden.data_as<float>(), B, T, C));
}

void first_token_backward(TensorView dhidden, TensorView dout) {
  const char* op = "first_token_backward";
  if (dhidden.rank() != 3)
    throw ShapeError("first_token_backward: dhidden must be (B, T, C), got " + dhidden.describe());
  const int64_t B = dhidden.dim(0), T = dhidden.dim(1), C = dhidden.dim(2);
  check_f32(op, "dhidden", dhidden, dhidden.shape);
  check_f32(op, "dout", dout, Shape{B, C});
  const Device dev = common_device(op, {dhidden, dout});
  FTUNE_DISPATCH(
      op, dev, cpu::first_token_backward(dhidden.data_as<float>(), dout.data_as<float>(), B, T, C),
      cuda::first_token_backward(dhidden.data_as<float>(), dout.data_as<float>(), B, T, C));
}

}  // namespace ftune
