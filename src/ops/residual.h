// Residual add: out = a + b. Its backward hands the same gradient to both inputs
// (da = db = dout, overwritten); inside the encoder the add is fused into the following layer
// norm (see layer_norm.h), and this op is the composed reference it is tested against.
#pragma once

#include "core/tensor.h"

namespace ftune {

void residual_forward(TensorView out, TensorView a, TensorView b);
void residual_backward(TensorView da, TensorView db, TensorView dout);

namespace cpu {
void residual_forward(float* out, const float* a, const float* b, int64_t n);
}  // namespace cpu

namespace cuda {
void residual_forward(float* out, const float* a, const float* b, int64_t n);
}  // namespace cuda

}  // namespace ftune
