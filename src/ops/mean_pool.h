// Mean pooling over each row's real tokens: ModernBERT's classifier_pooling "mean", as HF computes
// it, (h * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True):
//   forward:  out (B, C)[b] = (sum over the real tokens t of row b of hidden[t]) / count_b
//   backward: dhidden (N, C) = dout[b] / count_b at the real tokens of row b, 0 elsewhere
//             (overwritten)
// Rows: padded (B rows of T tokens, mask (B T) i32: 1 real, 0 padding) or packed (row b is tokens
// [cu[b], cu[b + 1]), every one real); sums run over t in order, in fp32. A row without real
// tokens pools to 0 (HF divides 0 by 0; ftune's batches never hold such a row). hidden may be
// (B, T, C) or (N, C); f32.
#pragma once

#include "core/tensor.h"

namespace ftune {

struct MeanPoolRows {
  int64_t B = 0, T = 0;   // padded: B rows of T tokens
  TensorView mask;        // padded: (B T) i32
  TensorView cu_seqlens;  // packed: (B + 1) i32 on the op's device (mask undefined)
};

void mean_pool_forward(TensorView out, TensorView hidden, const MeanPoolRows& rows);
void mean_pool_backward(TensorView dhidden, TensorView dout, const MeanPoolRows& rows);

namespace cpu {
// cu null: padded rows of T with `mask`; else packed rows (mask null).
void mean_pool_forward(float* out, const float* hidden, const int32_t* mask, const int32_t* cu,
                       int64_t B, int64_t T, int64_t C);
void mean_pool_backward(float* dhidden, const float* dout, const int32_t* mask, const int32_t* cu,
                        int64_t B, int64_t T, int64_t C);
}  // namespace cpu

namespace cuda {
void mean_pool_forward(float* out, const float* hidden, const int32_t* mask, const int32_t* cu,
                       int64_t B, int64_t T, int64_t C);
void mean_pool_backward(float* dhidden, const float* dout, const int32_t* mask, const int32_t* cu,
                        int64_t B, int64_t T, int64_t C);
}  // namespace cuda

}  // namespace ftune
