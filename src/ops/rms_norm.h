// RMS normalisation over the last dimension (Llama, Mistral, Qwen, Gemma), in HF's two forms:
//   forward:  rstd (N) saved; out (N, C) = inp * rstd * (offset + weight),
//             rstd = 1 / sqrt(mean_c(inp^2) + eps); offset 0 (LlamaRMSNorm: weight) or
//             1 (GemmaRMSNorm: 1 + weight, computed in fp32)
//   backward: with xhat = inp * rstd and g = dout * (offset + weight):
//             dinp (N, C) = rstd * (g - xhat * mean_c(g * xhat))   overwritten
//             dweight (C) += sum_n dout * xhat                      accumulated; undefined for a
//             frozen norm (adapters), which then only computes dinp
// Rows are the N rows of a 2-D view with a contiguous inner dimension; inp / out / dinp / dout
// may have a row stride (Qwen3's per-head q/k norms run on (N Hq, D) rows of a fused projection
// as N rows of Hq heads: see `heads`). The parameter gradient is reduced through per-thread
// partial sums in `workspace` (rms_norm_backward_workspace floats: compute_threads() x C on the
// CPU, none on CUDA) and added in a fixed order: results depend only on the thread count.
// f32 tensors (16-bit activations are a later step of the decoder families).
#pragma once

#include "core/tensor.h"

namespace ftune {

// The row geometry of one call: N rows (tokens), each of `heads` groups of C contiguous values
// normalised on their own (heads 1: the whole row), rows `ld` floats apart.
struct RmsNormRows {
  int64_t N = 0, heads = 1, C = 0, ld = 0;
};

// inp, out: (N, heads * C) views (any row stride, contiguous rows); weight (C).
void rms_norm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                      float eps, float offset, int64_t heads = 1);
// dinp may alias dout (in place); rstd (N * heads).
void rms_norm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                       TensorView weight, TensorView rstd, float offset, TensorView workspace,
                       int64_t heads = 1);
int64_t rms_norm_backward_workspace(Device device, int64_t C);

namespace cpu {
void rms_norm_forward(float* out, int64_t ldo, float* rstd, const float* inp, int64_t ldi,
                      const float* weight, const RmsNormRows& r, float eps, float offset);
void rms_norm_backward(float* dinp, int64_t lddi, float* dweight, const float* dout, int64_t lddo,
                       const float* inp, int64_t ldi, const float* weight, const float* rstd,
                       const RmsNormRows& r, float offset, float* workspace);
}  // namespace cpu

namespace cuda {
void rms_norm_forward(float* out, int64_t ldo, float* rstd, const float* inp, int64_t ldi,
                      const float* weight, const RmsNormRows& r, float eps, float offset);
void rms_norm_backward(float* dinp, int64_t lddi, float* dweight, const float* dout, int64_t lddo,
                       const float* inp, int64_t ldi, const float* weight, const float* rstd,
                       const RmsNormRows& r, float offset);
}  // namespace cuda

}  // namespace ftune
