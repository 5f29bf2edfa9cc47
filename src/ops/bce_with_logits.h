// Binary cross-entropy with logits, PyTorch's exact semantics
// (torch.nn.functional.binary_cross_entropy_with_logits, reduction "mean") over B rows of K
// independent scores: K = 1 for a reranker's or cross-encoder's single score (sentence-
// transformers' CrossEncoder default loss), K > 1 for multi-label classification (one sigmoid per
// label). Targets are 0/1 or soft targets in [0, 1].
//   l[i, c] = max(z, 0) - z t + log(1 + exp(-|z|))     (= -t log s(z) - (1 - t) log(1 - s(z)))
//   loss    = sum over counted rows i and all c of l[i, c] / (n K)
// with n the counted rows: rows whose label (the optional (B) i32 `labels`, the trainer's row
// mask) is negative (-100) are not counted; without labels every row counts. `probs` (B, K) keeps
// sigmoid(z) for the backward pass; `loss` is a 1-element device tensor (no host round trip).
// Gradient (times dloss, overwritten; 0 on uncounted rows):
//   dlogits[i, c] = (sigmoid(z[i, c]) - t[i, c]) / (n K)
#pragma once

#include "core/tensor.h"

namespace ftune {

// logits, targets, probs: (B, K) f32; loss (1) f32; labels (B) i32 or undefined.
void bce_with_logits_forward(TensorView loss, TensorView probs, TensorView logits,
                             TensorView targets, TensorView labels = {});
// dloss_at (optional, on the tensors' device): a further factor of dloss read when the kernel runs
// (the trainer's per-micro-batch loss share, core/philox.h MicroParams), as cross_entropy has.
void bce_with_logits_backward(TensorView dlogits, TensorView probs, TensorView targets,
                              TensorView labels, float dloss, const float* dloss_at = nullptr);

namespace cpu {
void bce_with_logits_forward(float* loss, float* probs, const float* logits, const float* targets,
                             const int32_t* labels, int64_t B, int64_t K);
void bce_with_logits_backward(float* dlogits, const float* probs, const float* targets,
                              const int32_t* labels, float dloss, int64_t B, int64_t K);
}  // namespace cpu

namespace cuda {
void bce_with_logits_forward(float* loss, float* probs, const float* logits, const float* targets,
                             const int32_t* labels, int64_t B, int64_t K);
void bce_with_logits_backward(float* dlogits, const float* probs, const float* targets,
                              const int32_t* labels, float dloss, const float* dloss_at, int64_t B,
                              int64_t K);
}  // namespace cuda

}  // namespace ftune
