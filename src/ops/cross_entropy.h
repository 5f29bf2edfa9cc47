// Softmax cross-entropy over K classes with PyTorch's exact semantics
// (torch.nn.functional.cross_entropy, reduction "mean"):
//   logp = log_softmax(logits);  W = sum over counted rows of w[y_i]  (w = 1 without class weights)
//   loss = (1 - eps) * sum_i w[y_i] * -logp[i, y_i] / W
//        + eps / K   * sum_i sum_c w[c] * -logp[i, c] / W
// with label smoothing eps; rows whose label is negative (ignore_index -100) are not counted.
// Gradient (times dloss, overwritten):
//   dlogits[i, c] = ((1 - eps) w[y_i] (p[i, c] - [c == y_i]) + eps / K (p[i, c] S_w - w[c])) / W
// where S_w = sum_c w[c]. `probs` (B, K) keeps the softmax for the backward pass; `loss` is a
// 1-element device tensor, so the step never has to read it back to the host.
#pragma once

#include "core/tensor.h"

namespace ftune {

struct CrossEntropyOptions {
  float label_smoothing = 0.0f;
  TensorView class_weights;  // (K) f32, optional
};

void cross_entropy_forward(TensorView loss, TensorView probs, TensorView logits, TensorView labels,
                           const CrossEntropyOptions& options);
// dloss_at (optional, in memory on the tensors' device): a further factor of dloss, read when the
// kernel runs (the trainer's per-micro-batch loss share, so a replayed CUDA graph sees the
// micro-batch's value: core/philox.h MicroParams).
void cross_entropy_backward(TensorView dlogits, TensorView probs, TensorView labels,
                            const CrossEntropyOptions& options, float dloss,
                            const float* dloss_at = nullptr);

namespace cpu {
void cross_entropy_forward(float* loss, float* probs, const float* logits, const int32_t* labels,
                           const float* weights, float eps, int64_t B, int64_t K);
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* labels,
                            const float* weights, float eps, float dloss, int64_t B, int64_t K);
}  // namespace cpu

namespace cuda {
void cross_entropy_forward(float* loss, float* probs, const float* logits, const int32_t* labels,
                           const float* weights, float eps, int64_t B, int64_t K);
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* labels,
                            const float* weights, float eps, float dloss, const float* dloss_at,
                            int64_t B, int64_t K);
}  // namespace cuda

}  // namespace ftune
