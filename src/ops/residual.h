// Residual add: out = a + b. Its backward hands the same gradient to both inputs
// (da = db = dout, overwritten); inside the encoder the add is fused into the following layer
// norm (see layer_norm.h), and this op is the composed reference it is tested against.
// Mixed precision (autocast's type promotion): a, b and out may each be f32, bf16 or f16, e.g. a
// bf16 sublayer output plus the fp32 residual stream into an fp32 sum; fp32 math, one rounding.
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
void residual_forward_mixed(void* out, DType out_type, const void* a, DType a_type, const void* b,
                            DType b_type, int64_t n);
}  // namespace cuda

}  // namespace ftune
