// MarginMSE over query groups (Hofstätter et al. 2021; sentence-transformers' cross-encoder
// MarginMSELoss: nn.MSELoss(reduction "mean") between the student's margins s_pos - s_neg_i and
// the teacher's t_pos - t_neg_i, over every (query, negative)). Groups are consecutive runs of
// group_size rows whose FIRST row is the positive (train/group_sampler.h lays them out so; the
// columns [query, positive, negative_1, ...] of sentence-transformers), one score per row (K = 1):
//   r[p + i] = (s[p] - s[p + i]) - (t[p] - t[p + i])     i = 1 .. group_size - 1, p a group's first
//   loss     = sum over counted groups and i of r^2 / (G' (group_size - 1))
// with G' the counted groups: those whose first row's label (the (N) i32 `labels`, the trainer's
// row mask) is not negative (-100); all uncounted: NaN (0 / 0), as PyTorch's empty mean.
// `residual` (N) keeps r (0 at each group's first row) for the backward pass; `loss` is a
// 1-element device tensor.
// Gradient (times dloss, overwritten; 0 in uncounted groups), n = G' (group_size - 1):
//   ds[p + i] = -2 r[p + i] / n,   ds[p] = 2 sum_i r[p + i] / n
#pragma once

#include "core/tensor.h"

namespace ftune {

// logits (N, 1) f32; teacher (N) f32; labels (N) i32; residual (N) f32; loss (1) f32; N a multiple
// of group_size >= 2.
void margin_mse_loss_forward(TensorView loss, TensorView residual, TensorView logits,
                             TensorView teacher, TensorView labels, int64_t group_size);
// dlogits (N, 1); dloss_at (optional, on the tensors' device): a further factor of dloss read when
// the kernel runs (ops/cross_entropy.h).
void margin_mse_loss_backward(TensorView dlogits, TensorView residual, TensorView labels,
                              int64_t group_size, float dloss, const float* dloss_at = nullptr);

namespace cpu {
void margin_mse_loss_forward(float* loss, float* residual, const float* logits,
                             const float* teacher, const int32_t* labels, int64_t N,
                             int64_t group_size);
void margin_mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels,
                              float dloss, int64_t N, int64_t group_size);
}  // namespace cpu

namespace cuda {
void margin_mse_loss_forward(float* loss, float* residual, const float* logits,
                             const float* teacher, const int32_t* labels, int64_t N,
                             int64_t group_size);
void margin_mse_loss_backward(float* dlogits, const float* residual, const int32_t* labels,
                              float dloss, const float* dloss_at, int64_t N, int64_t group_size);
}  // namespace cuda

}  // namespace ftune
