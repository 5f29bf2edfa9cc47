// Sequence-classification heads exactly as Hugging Face defines them, both reading the first
// token (B, C) of the last hidden state:
//   BERT:            logits = classifier(dropout(tanh(pooler.dense(h0))))
//   RoBERTa / XLM-R: logits = out_proj(dropout(tanh(dense(dropout(h0)))))
// The dense + tanh part is ops/tanh_pooler in both. Dropout rate: classifier_dropout, or
// hidden_dropout_prob when the config leaves it null (as HF). BERT's pooler.dense can carry a
// LoRA / DoRA adapter (PEFT target "bert.pooler.dense", models/adapters.h): then the linear part
// and its adapter run as models/adapter_site.h, and tanh after them.
// Gradient rule: parameter gradients accumulate (+=); activation gradients overwrite (=).
#pragma once

#include "core/arena.h"
#include "models/encoder.h"

namespace ftune {

struct HeadWeights {
  TensorView dense_w, dense_b;  // (C, C), (C): BERT pooler.dense / RoBERTa classifier.dense
  TensorView out_w, out_b;      // (K, C), (K): BERT classifier / RoBERTa classifier.out_proj
};

struct HeadActivations {
  TensorView cls, x, pooled, pooled_drop, logits;  // (B, C) x4, (B, K)
  TensorView grad_pooled, grad_x, grad_scratch;    // (B, C)
  // The pooler's adapter: u (B, r), DoRA's z (B, C), backward's h (B, r), dropout scratch (B, C).
  TensorView lora_u, dora_z, lora_h, lora_scratch;
};

// HF names of the head parameters, in the order they are added: dense weight and bias (C x C,
// C), then the output layer's weight and bias (K x C, K: the only ones sized by the labels).
std::vector<std::string> head_param_names(const EncoderConfig& config);
void add_head_params(const EncoderConfig& config, ParamTable& table);
HeadWeights bind_head_weights(const EncoderConfig& config, const ParamTable& table,
                              TensorView flat);

void plan_head_activations(const EncoderConfig& config, int64_t max_batch, bool training,
                           ArenaPlan& plan, const AdapterConfig& adapters = {});
HeadActivations bind_head_activations(const Arena& arena, bool training);

// hidden (B, T, C) -> logits (B, K), returned as a view of acts.logits. adapters: the model's
// (their pooler adapter, if any, runs here).
TensorView head_forward(const EncoderConfig& config, const HeadWeights& w, HeadActivations& acts,
                        TensorView hidden, const DropoutPlan& dropout,
                        const EncoderAdapters* adapters = nullptr);
// dlogits (B, K) -> parameter gradients (+=) and dhidden (B, T, C) (overwritten); adapter_grads:
// the gradients of `adapters`.
void head_backward(const EncoderConfig& config, const HeadWeights& w, const HeadWeights& grads,
                   HeadActivations& acts, TensorView dlogits, TensorView dhidden,
                   const DropoutPlan& dropout, const EncoderAdapters* adapters = nullptr,
                   const EncoderAdapters* adapter_grads = nullptr);

inline uint32_t head_input_dropout_site() {
  return 0x10000;
}
inline uint32_t head_pooled_dropout_site() {
  return 0x10001;
}
inline uint32_t pooler_adapter_dropout_site() {  // the input dropout of the pooler's adapter
  return 0x10002;
}

}  // namespace ftune
