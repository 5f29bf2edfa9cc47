// The causal-LM objective of a SequenceClassifier whose model is a causal LM
// (ModelInfo::causal_lm, HF's *ForCausalLM): the loss through the LM head on the final hidden
// states, never forming the (tokens x vocabulary) logits (ops/lm_head_loss.h), with the buffers it
// plans: the per-token log-sum-exp kept for the backward, one block of logits as workspace and
// the hidden states' gradient handed to the backbone's backward.
//
// The loss is transformers' ForCausalLMLoss: cross-entropy of each position's logits against the
// next token (the labels arrive shifted, -100 where not counted), summed and divided by the
// tokens counted (a mean), or by `normalizer` when > 0 (the tokens counted over all micro-batches
// of an optimizer step, transformers' num_items_in_batch), so that micro-batches add up to the
// step's mean.
#pragma once

#include <cstdint>

#include "core/buffer_table.h"
#include "ops/lm_head_loss.h"

namespace ftune {

class CausalLmLoss {
 public:
  CausalLmLoss() = default;
  CausalLmLoss(int64_t max_tokens, int64_t hidden, int64_t vocab, float softcap)
      : shape_{max_tokens, hidden, vocab, 256, 4096, softcap} {}

  // Its buffers; with training, the hidden states' gradient too.
  void buffers(BufferTable& t, bool training);
  // loss (1) of hidden (N, C) through W (V, C) against labels (N); returns the tokens counted.
  int64_t forward(TensorView loss, TensorView hidden, TensorView W, TensorView labels,
                  double normalizer);
  // The gradient of dloss x loss (x *dloss_at when given) with respect to hidden (returned, N x
  // C, overwritten) and, when dW is defined (a trained head), W (+=).
  TensorView backward(TensorView hidden, TensorView W, TensorView dW, TensorView labels,
                      double normalizer, float dloss, const float* dloss_at);
  int64_t counted() const { return counted_; }  // of the last forward

 private:
  LmHeadLossShape shape_at(int64_t tokens) const;

  LmHeadLossShape shape_;  // tokens: the most planned
  TensorView lse_, workspace_, dhidden_;
  int64_t counted_ = 0;
};

}  // namespace ftune
