// Sequence-classification heads exactly as Hugging Face defines them, both reading the first
// token (B, C) of the last hidden state:
//   BERT:            logits = classifier(dropout(tanh(pooler.dense(h0))))
//   RoBERTa / XLM-R: logits = out_proj(dropout(tanh(dense(dropout(h0)))))
// The dense + tanh part is ops/tanh_pooler in both. Dropout rate: classifier_dropout, or
// hidden_dropout_prob when the config leaves it null (as HF). The first token of a row is its
// position 0 in a padded batch and token cu[b] of a packed one (models/head_pooling.h, shared
// with the other families). BERT's pooler.dense can carry a LoRA / DoRA adapter (PEFT target
// "bert.pooler.dense"; the BERT family's adapter site past its last layer,
// models/bert/bert_family.h): then the linear part and its adapter run as
// models/adapter_site.h, and tanh after them.
// Gradient rule: parameter gradients accumulate (+=); activation gradients overwrite (=).
#pragma once

#include "core/arena.h"
#include "models/bert/encoder.h"
#include "models/head_pooling.h"
#include "models/layers/adapter_buffers.h"

namespace ftune {

struct HeadWeights {
  TensorView dense_w, dense_b;  // (C, C), (C): BERT pooler.dense / RoBERTa classifier.dense
  TensorView out_w, out_b;      // (K, C), (K): BERT classifier / RoBERTa classifier.out_proj
};

struct HeadActivations {
  TensorView cls, x, pooled, pooled_drop, logits;  // (B, C) x4, (B, K)
  TensorView grad_pooled, grad_x, grad_scratch;    // (B, C)
  // The pooler's adapter (models/layers/adapter_buffers.h): u (B, r) and DoRA's z (B, C); its
  // scratch: backward's h (B, r) and adapter dropout's (B, C).
  AdapterSiteBuffers pooler_adapter;
  AdapterScratch adapter_scratch;
};

// HF names of the head parameters, in the order they are added: dense weight and bias (C x C,
// C), then the output layer's weight and bias (K x C, K: the only ones sized by the labels).
std::vector<std::string> head_param_names(const EncoderConfig& config);
void add_head_params(const EncoderConfig& config, ParamTable& table);
HeadWeights bind_head_weights(const EncoderConfig& config, const ParamViews& p);

// The head's buffers for batches of up to max_rows rows, bound to `acts` (with the pooler's
// adapter buffers when `adapters` targets it).
void head_buffers(const EncoderConfig& config, int64_t max_rows, bool training,
                  const AdapterConfig& adapters, HeadActivations& acts, BufferTable& table);

// The pooler's adapter site: past the encoder's layers (BERT only; AdapterSet::at).
AdapterSite pooler_adapter_site(const EncoderConfig& config);

// hidden (B, T, C) padded or (N, C) packed -> logits (B, K), returned as a view of acts.logits.
// adapters: the model's (the pooler's, if any, runs here).
TensorView head_forward(const EncoderConfig& config, const HeadWeights& w, HeadActivations& acts,
                        TensorView hidden, const TokenInputs& in, const DropoutPlan& dropout,
                        const AdapterSet& adapters);
// dlogits (B, K) -> parameter gradients (+=) and dhidden (N, C) (overwritten: zero but at the
// first tokens); adapter_grads: the gradients of `adapters`.
void head_backward(const EncoderConfig& config, const HeadWeights& w, const HeadWeights& grads,
                   HeadActivations& acts, TensorView dlogits, TensorView dhidden,
                   const TokenInputs& in, const DropoutPlan& dropout, const AdapterSet& adapters,
                   const AdapterSet& adapter_grads);

// head_input_dropout_site() and head_pooled_dropout_site(): models/head_pooling.h.
inline uint32_t pooler_adapter_dropout_site() {  // the input dropout of the pooler's adapter
  return 0x10002;
}

}  // namespace ftune
