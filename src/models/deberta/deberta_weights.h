// The DeBERTa-v2/v3 family's parameters (models/deberta/deberta_family.h): views of its weights,
// its name
// map (HF names of DebertaV2ForSequenceClassification), its adapter sites and PEFT module tree,
// and its activation buffers. Internal to the family's files.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer_table.h"
#include "models/backbone.h"
#include "models/deberta/deberta_config.h"
#include "models/layers/adapter_buffers.h"

namespace ftune {

// The adaptable linears of a layer, in PEFT's naming order (the kinds of the family's sites); the
// pooler's dense is kind 0 of a layer past the last one. PosKey / PosQuery are the separate
// pos_key_proj / pos_query_proj (without share_att_key). They are also the kinds of the positional
// projections' adapter buffers and dropout streams in either case: with share_att_key, HF runs
// key_proj / query_proj on the relative embeddings, so PEFT's key_proj / query_proj adapter acts
// there a second time (its own dropout mask, the same A, B and magnitude).
enum class DebertaSite { Query, Key, Value, AttnOut, FfnIn, FfnOut, PosKey, PosQuery };
constexpr int kDebertaSites = 8;

struct DebertaLayerWeights {
  TensorView qkv_w, qkv_b;              // (3C, C), (3C): query_proj, key_proj, value_proj stacked
  TensorView pos_key_w, pos_key_b;      // (C, C), (C): pos_key_proj (without share_att_key, c2p)
  TensorView pos_query_w, pos_query_b;  // pos_query_proj (without share_att_key, p2c)
  TensorView attn_out_w, attn_out_b, ln1_w, ln1_b;
  TensorView ffn_in_w, ffn_in_b, ffn_out_w, ffn_out_b, ln2_w, ln2_b;
};

struct DebertaWeights {
  TensorView word, position, token_type, emb_ln_w, emb_ln_b;  // position / type may be absent
  std::vector<DebertaLayerWeights> layers;
  TensorView rel, rel_ln_w, rel_ln_b;  // (2S, C) rel_embeddings, encoder.LayerNorm (norm_rel_ebd)
  TensorView pool_w, pool_b, cls_w, cls_b;  // pooler.dense (C, C), classifier (K, C)
};

void add_deberta_params(const DebertaConfig& config, ParamTable& table);
DebertaWeights bind_deberta_weights(const DebertaConfig& config, const ParamViews& p);
// The layers' parameters: one contiguous range of the table (first element, count).
std::pair<int64_t, int64_t> deberta_layer_range(const DebertaConfig& config,
                                                const ParamTable& table);
// pooler.dense weight and bias, classifier weight and bias.
std::vector<std::string> deberta_head_param_names();
std::vector<AdapterSite> deberta_adapter_sites(const DebertaConfig& config);
// The pooler's adapter site (layer num_layers, kind 0).
AdapterSite deberta_pooler_site(const DebertaConfig& config);
// named_modules() of DebertaV2ForSequenceClassification with `layers` layers (pos_key_proj /
// pos_query_proj present: share_att_key false, with c2p / p2c).
std::vector<ClassifierModule> deberta_modules(int64_t layers, bool pos_key, bool pos_query);

// Activation buffers (training: every layer's, or with gradient checkpointing every layer's output
// and one slot for the rest; inference: two slots, ping-pong). Mixed precision (compute bf16 /
// f16): the GEMMs' outputs (qkv, ctx, attn, ffn_pre, ffn_act, ffn_out, pos_key, pos_query) and
// their gradients are 16-bit, and so are the GEMMs' copies of fp32 inputs (x_h, ln1_h, rel_h);
// the residual stream, every LayerNorm, the attention's probabilities, the position gradients
// the op writes and the head stay fp32.
struct DebertaLayerActs {
  TensorView qkv, probs, ctx, attn, sum1, ln1, ln1_mean, ln1_rstd;
  TensorView ffn_pre, ffn_act, ffn_out, sum2, out, ln2_mean, ln2_rstd;
  TensorView rel_drop, pos_key, pos_query;  // (2S, C) each
  TensorView x_h, ln1_h, rel_h;  // mixed precision: 16-bit copies of the layer input, ln1, rel
  // Per adapter kind (DebertaSite): u = x_d A^T (rows, r), DoRA's z (rows, out); rows are the
  // tokens N, or 2S for the positional kinds.
  std::array<AdapterSiteBuffers, kDebertaSites> adapter;
};

struct DebertaActs {
  TensorView emb_sum, emb_mean, emb_rstd, emb_out;
  TensorView rel_norm, rel_mean, rel_rstd;  // the normalised relative embeddings (2S, C)
  std::vector<DebertaLayerActs> layers;
  TensorView cls, cls_drop, pool_pre, pooled, pooled_drop, logits;  // head: (B, C) x5, (B, K)
  // Backward scratch shared by the layers.
  TensorView grad_out, grad_sum, grad_tmp, grad_ctx, grad_ffn, grad_qkv;
  TensorView grad_pos_key, grad_pos_query, grad_rel_drop, grad_rel, grad_rel_norm;
  TensorView grad_pos_key_row, grad_pos_query_row;  // packed: a later row's share (2S, C)
  TensorView grad_pool_a, grad_pool_b;  // (B, C)
  TensorView workspace;
  // Adapters (models/layers/adapter_buffers.h): the pooler's u (B, r) and z (B, C); the scratch
  // every site shares: backward's h (max(N, 2S), r), the adapter dropout's (max(N, 2S) x
  // max(C, F)) and, under mixed precision, the fp32 staging of 16-bit inputs, outputs and input
  // gradients.
  AdapterSiteBuffers pool_adapter;
  AdapterScratch adapter_scratch;
  // Mixed precision: the position gradient's 16-bit copy the projections' backward reads (2S, C).
  TensorView grad_pos_h;
  DType compute = DType::F32;
  bool checkpointing = false;  // one slot for all layers but their outputs: backward recomputes
  // First-token form (models/layers/first_token_rows.h): the last layer past attention runs for
  // the first tokens alone; first_ctx (compute type) and first_x (fp32; in backward its gradient)
  // hold their attention output and layer input, first_dctx the attention output's gradient,
  // (max_rows, C) each.
  bool first_token_last = false;
  TensorView first_ctx, first_x, first_dctx;
};

void deberta_buffers(const DebertaConfig& config, const BackboneShape& shape, DebertaActs& acts,
                     BufferTable& table);

}  // namespace ftune
