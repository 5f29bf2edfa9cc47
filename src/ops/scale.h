// Scaling in place by a constant: x = alpha * x (one fp32 multiply per element, as torch's
// `tensor * scalar`). Gemma multiplies its embeddings by sqrt(hidden_size) (the backward pass is
// the same op on the gradient, d(alpha x) = alpha dx); gradient clipping scales the gradients.
// f32 tensors, contiguous.
#pragma once

#include "core/tensor.h"

namespace ftune {

void scale_inplace(TensorView x, float alpha);

namespace cpu {
void scale_inplace(float* x, int64_t n, float alpha);
}  // namespace cpu

namespace cuda {
void scale_inplace(float* x, int64_t n, float alpha);
}  // namespace cuda

}  // namespace ftune
