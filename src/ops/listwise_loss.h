// Listwise softmax cross-entropy over query groups (FlagEmbedding's reranker loss: each group of
// one positive and group_size - 1 negatives, cross-entropy of the softmax over the group's scores
// with the positive as target), generalised to graded relevance:
//   s_i      = logits[i, 0] (K = 1)  or  logits[i, 1] - logits[i, 0] (K = 2)   (train/ranking
//              metrics' row score, so one-score and two-logit heads train alike)
//   p_i      = exp(s_i) / sum_{j in g} exp(s_j)       over the rows of group g
//   t_i      = rel_i / sum_{j in g} rel_j             (one positive: t = 1 there, 0 elsewhere)
//   loss     = (1 / G') sum over groups with sum rel > 0 of  -sum_{i in g} t_i log p_i
// where G' counts those groups (a group without a positive is not counted; all groups without
// one: loss NaN, 0 / 0, as cross_entropy). Groups are rows [offsets[g], offsets[g+1]).
// Gradient (times dloss, overwritten; rows of uncounted groups get 0):
//   ds_i = (p_i - t_i) / G';   K = 1: dlogits[i, 0] = ds_i;  K = 2: dlogits[i, 1] = ds_i,
//   dlogits[i, 0] = -ds_i.
// `probs` (N) keeps the group softmax for the backward pass; `loss` is a 1-element device tensor.
// Two layouts: groups by offsets with a relevance vector, or (the trainer's micro-batches,
// train/group_sampler.h) consecutive groups of a fixed size with the labels as relevance (a label
// id > 0 is its relevance; -100 and 0 are not relevant), so nothing but the labels goes to the
// device per micro-batch.
#pragma once

#include "core/tensor.h"

namespace ftune {

// logits (N, K) f32 with K in {1, 2}; relevance (N) f32 >= 0; offsets (G + 1) i32, offsets[0] = 0,
// non-decreasing, offsets[G] = N; probs (N) f32; loss (1) f32.
void listwise_loss_forward(TensorView loss, TensorView probs, TensorView logits,
                           TensorView relevance, TensorView offsets);
// dloss_at (optional, on the tensors' device): a further factor of dloss read when the kernel runs
// (ops/cross_entropy.h).
void listwise_loss_backward(TensorView dlogits, TensorView probs, TensorView relevance,
                            TensorView offsets, float dloss, const float* dloss_at = nullptr);
// Fixed groups: rows [g * group_size, (g + 1) * group_size), N a multiple of group_size; labels
// (N) i32 (relevance max(label, 0)), or (N) f32 relevance >= 0 (a one-score head's targets:
// training.loss listwise on num_labels 1).
void listwise_loss_forward(TensorView loss, TensorView probs, TensorView logits, TensorView labels,
                           int64_t group_size);
void listwise_loss_backward(TensorView dlogits, TensorView probs, TensorView labels,
                            int64_t group_size, float dloss, const float* dloss_at = nullptr);

// Where the groups and their relevance are: offsets (G + 1) or, when null, groups of group_size
// rows; relevance (N) or, when null, max(labels[i], 0).
struct ListwiseGroups {
  const int32_t* offsets = nullptr;
  int64_t group_size = 0;
  const float* relevance = nullptr;
  const int32_t* labels = nullptr;
};

namespace cpu {
void listwise_loss_forward(float* loss, float* probs, const float* logits,
                           const ListwiseGroups& groups, int64_t G, int64_t K);
void listwise_loss_backward(float* dlogits, const float* probs, const ListwiseGroups& groups,
                            float dloss, int64_t G, int64_t K);
}  // namespace cpu

namespace cuda {
void listwise_loss_forward(float* loss, float* probs, const float* logits,
                           const ListwiseGroups& groups, int64_t G, int64_t K);
void listwise_loss_backward(float* dlogits, const float* probs, const ListwiseGroups& groups,
                            float dloss, const float* dloss_at, int64_t G, int64_t K);
}  // namespace cuda

}  // namespace ftune
