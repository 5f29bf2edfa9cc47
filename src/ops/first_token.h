// The first token of every sequence ([CLS] / <s>), which both classification heads read.
//   forward:  out (B, C) = hidden (B, T, C)[:, 0, :]
//   backward: dhidden (B, T, C) = 0 except dhidden[:, 0, :] = dout   (overwritten)
#pragma once

#include "core/tensor.h"

namespace ftune {

void first_token_forward(TensorView out, TensorView hidden);
void first_token_backward(TensorView dhidden, TensorView dout);

namespace cpu {
void first_token_forward(float* out, const float* hidden, int64_t B, int64_t T, int64_t C);
void first_token_backward(float* dhidden, const float* dout, int64_t B, int64_t T, int64_t C);
}  // namespace cpu

namespace cuda {
void first_token_forward(float* out, const float* hidden, int64_t B, int64_t T, int64_t C);
void first_token_backward(float* dhidden, const float* dout, int64_t B, int64_t T, int64_t C);
}  // namespace cuda

}  // namespace ftune
