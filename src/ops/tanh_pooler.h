// The tanh pooler shared by both classification heads: BERT's pooler and RoBERTa's
// classifier.dense are the same map, pooled (B, C) = tanh(inp (B, C) @ W^T (C, C) + b).
//   forward:  out = tanh(inp W^T + b)
//   backward: dpre = dout * (1 - out^2) (into `scratch`, (B, C)), then the linear backward:
//             dinp = dpre W (overwritten), dW += dpre^T inp, db += sum dpre
#pragma once

#include "core/tensor.h"

namespace ftune {

void tanh_pooler_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias);
void tanh_pooler_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView out, TensorView weight, TensorView scratch);
// Its two halves around the linear part, for a pooler whose linear has an adapter:
// x = tanh(x) in place, and dpre = dout * (1 - out^2).
void tanh_forward(TensorView x);
void tanh_backward(TensorView dpre, TensorView dout, TensorView out);

namespace cpu {
void tanh_inplace(float* x, int64_t n);
void tanh_backward(float* dpre, const float* dout, const float* out, int64_t n);
}  // namespace cpu

namespace cuda {
void tanh_inplace(float* x, int64_t n);
void tanh_backward(float* dpre, const float* dout, const float* out, int64_t n);
}  // namespace cuda

}  // namespace ftune
