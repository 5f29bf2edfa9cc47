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
  // The block of logits: 256 x 4096 on the CPU (4 MiB); on a GPU 1024 x 8192 (32 MiB), so that
  // each block's GEMM fills the device and a step launches few of them.
  CausalLmLoss(int64_t max_tokens, int64_t hidden, int64_t vocab, float softcap, Device device)
      : shape_{max_tokens, hidden,  vocab, device.is_cpu() ? 256 : 1024,
               device.is_cpu() ? 4096 : 8192, softcap} {}
  // The head's storage type (ops/lm_head_loss.h LmHeadLossShape::head): f32, or the compute type
  // of a frozen head stored in 16 bits. Before buffers().
  void set_head_type(DType head) { shape_.head = head; }
  // The GEMMs' operand type (LmHeadLossShape::compute): the model's compute type (autocast: an
  // fp32 head's blocks cast to bf16 / f16). Before buffers().
  void set_compute(DType compute) { shape_.compute = compute; }

  // Its buffers; with training, the hidden states' gradient too.
  void buffers(BufferTable& t, bool training);
  // loss (1) of hidden (N, C) through W (V, C) against labels (N).
  void forward(TensorView loss, TensorView hidden, TensorView W, TensorView labels,
                  double normalizer);
  // The gradient of dloss x loss (x *dloss_at when given) with respect to hidden (returned, N x
  // C, overwritten) and, when dW is defined (a trained head), W (+=).
  TensorView backward(TensorView hidden, TensorView W, TensorView dW, TensorView labels,
                      double normalizer, float dloss, const float* dloss_at);
  // The tokens the last forward counted (read from the device on a GPU: waits for it).
  int64_t counted() const;

 private:
  LmHeadLossShape shape_at(int64_t tokens) const;

  LmHeadLossShape shape_;  // tokens: the most planned
  TensorView lse_, workspace_, dhidden_;
  int64_t last_tokens_ = 0;  // of the last forward
};

}  // namespace ftune
