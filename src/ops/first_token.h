// The first token of every sequence ([CLS] / <s>), which both classification heads read.
//   forward:  out (B, C) = hidden (B, T, C)[:, 0, :]
//   backward: dhidden (B, T, C) = 0 except dhidden[:, 0, :] = dout   (overwritten)
// Packed rows (data/token_batch.h: row b is tokens [cu[b], cu[b + 1]) of N, no padding): the
// first token of row b is token cu[b], read from the device's cu_seqlens (no host copy of it, so
// a CUDA graph replays any packed batch of the same shape):
//   forward:  out (B, C) = hidden (N, C)[cu[b]]
//   backward: dhidden (N, C) = dout[b] at token cu[b], 0 elsewhere   (overwritten)
// Any float storage type (f32, bf16, f16; both tensors the same): the rows are copied bit for bit
// (16-bit rows need an even width).
#pragma once

#include "core/tensor.h"

namespace ftune {

void first_token_forward(TensorView out, TensorView hidden);
void first_token_backward(TensorView dhidden, TensorView dout);
void first_token_forward(TensorView out, TensorView hidden, TensorView cu_seqlens);
void first_token_backward(TensorView dhidden, TensorView dout, TensorView cu_seqlens);

namespace cpu {
void first_token_forward(float* out, const float* hidden, int64_t B, int64_t T, int64_t C);
void first_token_backward(float* dhidden, const float* dout, int64_t B, int64_t T, int64_t C);
}  // namespace cpu

namespace cuda {
void first_token_forward(float* out, const float* hidden, int64_t B, int64_t T, int64_t C);
void first_token_backward(float* dhidden, const float* dout, int64_t B, int64_t T, int64_t C);
}  // namespace cuda

}  // namespace ftune
