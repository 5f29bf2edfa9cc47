// Mean squared error of scores against float targets, PyTorch's exact semantics
// (torch.nn.functional.mse_loss, reduction "mean") over B rows of K scores: regression heads
// (STS-B-style targets, HF's problem_type "regression") and score distillation (the student's
// score against a teacher's).
//   r[i, c] = z[i, c] - t[i, c];   loss = sum over counted rows i and all c of r^2 / (n K)
// with n the counted rows: rows whose label (the optional (B) i32 `labels`, the trainer's row
// mask) is negative (-100) are not counted; without labels every row counts. `residual` (B, K)
// keeps r for the backward pass; `loss` is a 1-element device tensor (no host round trip).
// Gradient (times dloss, overwritten; 0 on uncounted rows):
//   dlogits[i, c] = 2 r[i, c] / (n K)
#pragma once

#include "core/tensor.h"

namespace ftune {

// logits, targets, residual: (B, K) f32; loss (1) f32; labels (B) i32 or undefined.
void mse_loss_forward(TensorView loss, TensorView residual, TensorView logits, TensorView targets,
                      TensorView labels = {});
// dloss_at: as in bce_with_logits.h.
void mse_loss_backward(TensorView dlogits, TensorView residual, TensorView labels, float dloss,
                       const float* dloss_at = nullptr);

namespace cpu {
void mse_loss_forward(float* loss, float* residual, const float* logits, const float* targets,
                      const int32_t* labels, int64_t B, int64_t K);
void mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels, float dloss,
                       int64_t B, int64_t K);
}  // namespace cpu

namespace cuda {
void mse_loss_forward(float* loss, float* residual, const float* logits, const float* targets,
                      const int32_t* labels, int64_t B, int64_t K);
void mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels, float dloss,
                       const float* dloss_at, int64_t B, int64_t K);
}  // namespace cuda

}  // namespace ftune
