// RoPE: argument checks and dispatch (ops/rope.h).
#include "ops/rope.h"

#include "ops/dispatch.h"

namespace ftune {
namespace {

void rotate(const char* op, TensorView x, TensorView positions, TensorView inv_freq,
            int64_t heads, float scaling, float sign) {
  if (x.rank() != 2 || heads <= 0 || x.dim(1) % heads != 0)
    throw ShapeError(fmt::format("{}: x must be (tokens, heads x head_dim) with {} heads, got {}",
                                 op, heads, x.describe()));
  RopeRows r;
  r.N = x.dim(0);
  r.heads = heads;
  r.head_dim = x.dim(1) / heads;
  r.ld = row_stride(op, "x", x, r.N, x.dim(1));
  if (inv_freq.rank() != 1)
    throw ShapeError(fmt::format("{}: inv_freq must be 1-D, got {}", op, inv_freq.describe()));
  r.rotary_dim = 2 * inv_freq.dim(0);
  if (r.rotary_dim <= 0 || r.rotary_dim > r.head_dim)
    throw ShapeError(fmt::format("{}: {} inverse frequencies rotate {} dims of a head of {}", op,
                                 inv_freq.dim(0), r.rotary_dim, r.head_dim));
  check_f32(op, "inv_freq", inv_freq, inv_freq.shape);
  check_shape(op, "positions", positions, Shape{r.N});
  check_dtype(op, "positions", positions, DType::I32);
  check_contiguous(op, "positions", positions);
  const Device dev = common_device(op, {x, positions, inv_freq});
  FTUNE_DISPATCH(op, dev,
                 cpu::rope_rotate(x.data_as<float>(), positions.data_as<int32_t>(),
                                  inv_freq.data_as<float>(), r, scaling, sign),
                 cuda::rope_rotate(x.data_as<float>(), positions.data_as<int32_t>(),
                                   inv_freq.data_as<float>(), r, scaling, sign));
}

}  // namespace

void rope_forward(TensorView x, TensorView positions, TensorView inv_freq, int64_t heads,
                  float scaling) {
  rotate("rope_forward", x, positions, inv_freq, heads, scaling, 1.0f);
}

void rope_backward(TensorView dx, TensorView positions, TensorView inv_freq, int64_t heads,
                   float scaling) {
  rotate("rope_backward", dx, positions, inv_freq, heads, scaling, -1.0f);
}

}  // namespace ftune
