// Linear layer with bias, weights stored (out_features, in_features) as in PyTorch.
//   forward:  out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)
//   backward: dinp (N, C) = dout @ weight        (overwritten, or added with accumulate_dinp)
//             dweight (OC, C) += dout^T @ inp    (parameter gradients accumulate)
//             dbias (OC) += sum over rows of dout
// Inputs may be row-strided 2-D views (e.g. the first token of every sequence); the innermost
// dimension must be contiguous. accumulate_dinp lets a layer whose input also feeds a residual
// path add its gradient to the one already there, without another pass.
#pragma once

#include "core/tensor.h"

namespace ftune {

void linear_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias);
void linear_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight, bool accumulate_dinp = false);

namespace cpu {
void linear_forward(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_backward(float* dinp, int64_t lddi, float* dweight, float* dbias, const float* dout,
                     int64_t lddo, const float* inp, int64_t ldi, const float* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate_dinp);
}  // namespace cpu

namespace cuda {
void linear_forward(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_backward(float* dinp, int64_t lddi, float* dweight, float* dbias, const float* dout,
                     int64_t lddo, const float* inp, int64_t ldi, const float* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate_dinp);
}  // namespace cuda

}  // namespace ftune
