// The DeBERTa-v2/v3 model over planned memory (a BackboneModel, models/backbone.h): post-LN
// layers like BERT's with the disentangled attention op (ops/disentangled_attention.h), the
// relative embeddings (LayerNorm'd once when norm_rel_ebd, dropped out and projected per layer:
// share_att_key reuses query_proj / key_proj, else pos_query_proj / pos_key_proj), and HF's
// ContextPooler head:
//   embeddings  LayerNorm(word[ids] (+ position[pos] when position_biased_input)
//               (+ type[type_ids] when type_vocab_size > 0)), dropout
//   layer       qkv = x W_qkv^T + b;  rel_l = dropout(rel);  pk = rel_l W_k'^T + b_k';
//               pq = rel_l W_q'^T + b_q';  ctx = disentangled_attention(q, k, v, pk, pq);
//               h1 = LN(dropout(ctx W_o^T + b_o) + x);  out = LN(dropout(gelu(h1 W_1^T) W_2^T) + h1)
//   head        logits = classifier(dropout(act(pooler.dense(dropout(h[:, 0])))))
//               (pooler_dropout, then cls_dropout or hidden_dropout_prob; act pooler_hidden_act)
// HF multiplies the embeddings by the attention mask; ftune leaves padding rows as they come out
// of the LayerNorm: they reach no real token (padding keys are masked, a padding query's scores
// pass no gradient), so logits, loss and gradients are HF's; only the hidden states at padding
// positions differ.
// Gradient checkpointing keeps each layer's output only and recomputes a layer's forward before
// its backward (Philox dropout masks: the same bits).
// LoRA / DoRA (models/adapter_site.h) on query_proj, key_proj, value_proj, attention.output.dense,
// intermediate.dense, output.dense, the separate pos_key_proj / pos_query_proj and pooler.dense,
// as PEFT runs them: with share_att_key HF calls key_proj / query_proj on the relative embeddings
// too, so their adapter acts on both inputs (its own dropout mask on each), and its gradients
// gather from both. The base weights are then frozen (no gradient GEMMs, no embedding backward).
// This version: fp32, padded batches (make_model refuses the others with a message).
#pragma once

#include <memory>

#include "models/backbone.h"
#include "models/deberta/deberta_config.h"

namespace ftune {

std::unique_ptr<BackboneModel> make_deberta_model(const DebertaConfig& config,
                                                  const BackboneShape& shape);

}  // namespace ftune
