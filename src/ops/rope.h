// Rotary position embedding (RoPE) as HF's Llama / Mistral / Qwen / Gemma apply it, in place on the
// query or key columns of a projection output:
//   for each token n, head h and i < R / 2, with angle a = pos[n] * inv_freq[i] (fp32 product),
//   c = cos(a) * scaling, s = sin(a) * scaling (HF's attention_scaling),
//     x1 = x[n, h D + i], x2 = x[n, h D + i + R / 2]
//     forward:  x1' = x1 c - x2 s,   x2' = x2 c + x1 s      (q * cos + rotate_half(q) * sin)
//     backward: dx1 = dy1 c + dy2 s, dx2 = dy2 c - dy1 s    (the transposed rotation, in place)
//   dims [R, D) of each head pass unchanged (partial rotary: R = D * partial_rotary_factor).
// x: (N, H D) f32 with any row stride and contiguous rows (a column block of the fused QKV output);
// positions: (N) i32, the token's position id; inv_freq: (R / 2) f32 on x's device, the rope type's
// inverse frequencies (default, linear, llama3: models/rope_config.h computes them as HF does).
// R is even and at most D.
#pragma once

#include "core/tensor.h"

namespace ftune {

struct RopeRows {
  int64_t N = 0, heads = 0, head_dim = 0, rotary_dim = 0, ld = 0;
};

void rope_forward(TensorView x, TensorView positions, TensorView inv_freq, int64_t heads,
                  float scaling);
void rope_backward(TensorView dx, TensorView positions, TensorView inv_freq, int64_t heads,
                   float scaling);

namespace cpu {
// sign +1: forward rotation; -1: the transposed one (backward).
void rope_rotate(float* x, const int32_t* positions, const float* inv_freq, const RopeRows& r,
                 float scaling, float sign);
}  // namespace cpu

namespace cuda {
void rope_rotate(float* x, const int32_t* positions, const float* inv_freq, const RopeRows& r,
                 float scaling, float sign);
}  // namespace cuda

}  // namespace ftune
