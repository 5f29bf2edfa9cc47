// The DeBERTa-v2/v3 name map and activation buffers (see deberta_weights.h). Query, key and value
// projections are consecutive in the table (weights, then biases), so that one fused (3C, C) GEMM
// reads them, as BERT's encoder does.
#include "models/deberta/deberta_weights.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "models/adapters.h"
#include "models/layers/layer_stack.h"
#include "ops/disentangled_attention.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"

namespace ftune {
namespace {

std::string layer_prefix(int64_t l) { return fmt::format("deberta.encoder.layer.{}.", l); }

constexpr const char* kEmb = "deberta.embeddings.";
constexpr const char* kRel = "deberta.encoder.rel_embeddings.weight";
constexpr const char* kRelNorm = "deberta.encoder.LayerNorm.";

// A layer's parameters in table order: name under the layer prefix, rows (C or F, or 3 for the
// fused q/k/v span), cols (C, F or 0 for a vector), the view it binds (null: inside a span).
struct LayerParam {
  const char* name;
  char rows, cols;  // 'C', 'F', 0
  TensorView DebertaLayerWeights::*view;
  int span;
};

constexpr LayerParam kQkv[] = {
    {"attention.self.query_proj.weight", 'C', 'C', &DebertaLayerWeights::qkv_w, 3},
    {"attention.self.key_proj.weight", 'C', 'C', nullptr, 0},
    {"attention.self.value_proj.weight", 'C', 'C', nullptr, 0},
    {"attention.self.query_proj.bias", 'C', 0, &DebertaLayerWeights::qkv_b, 3},
    {"attention.self.key_proj.bias", 'C', 0, nullptr, 0},
    {"attention.self.value_proj.bias", 'C', 0, nullptr, 0},
};
constexpr LayerParam kPosKey[] = {
    {"attention.self.pos_key_proj.weight", 'C', 'C', &DebertaLayerWeights::pos_key_w, 1},
    {"attention.self.pos_key_proj.bias", 'C', 0, &DebertaLayerWeights::pos_key_b, 1},
};
constexpr LayerParam kPosQuery[] = {
    {"attention.self.pos_query_proj.weight", 'C', 'C', &DebertaLayerWeights::pos_query_w, 1},
    {"attention.self.pos_query_proj.bias", 'C', 0, &DebertaLayerWeights::pos_query_b, 1},
};
constexpr LayerParam kRest[] = {
    {"attention.output.dense.weight", 'C', 'C', &DebertaLayerWeights::attn_out_w, 1},
    {"attention.output.dense.bias", 'C', 0, &DebertaLayerWeights::attn_out_b, 1},
    {"attention.output.LayerNorm.weight", 'C', 0, &DebertaLayerWeights::ln1_w, 1},
    {"attention.output.LayerNorm.bias", 'C', 0, &DebertaLayerWeights::ln1_b, 1},
    {"intermediate.dense.weight", 'F', 'C', &DebertaLayerWeights::ffn_in_w, 1},
    {"intermediate.dense.bias", 'F', 0, &DebertaLayerWeights::ffn_in_b, 1},
    {"output.dense.weight", 'C', 'F', &DebertaLayerWeights::ffn_out_w, 1},
    {"output.dense.bias", 'C', 0, &DebertaLayerWeights::ffn_out_b, 1},
    {"output.LayerNorm.weight", 'C', 0, &DebertaLayerWeights::ln2_w, 1},
    {"output.LayerNorm.bias", 'C', 0, &DebertaLayerWeights::ln2_b, 1},
};

constexpr const char* kSiteModules[kDebertaSites] = {
    "attention.self.query_proj", "attention.self.key_proj",     "attention.self.value_proj",
    "attention.output.dense",    "intermediate.dense",          "output.dense",
    "attention.self.pos_key_proj", "attention.self.pos_query_proj"};

// The layer's parameter groups present under `c`.
template <typename Fn>
void each_layer_param(const DebertaConfig& c, Fn fn) {
  for (const LayerParam& p : kQkv) fn(p);
  if (!c.share_att_key && c.c2p)
    for (const LayerParam& p : kPosKey) fn(p);
  if (!c.share_att_key && c.p2c)
    for (const LayerParam& p : kPosQuery) fn(p);
  for (const LayerParam& p : kRest) fn(p);
}

int64_t dim(const DebertaConfig& c, char d) {
  return d == 'C' ? c.hidden_size : d == 'F' ? c.intermediate_size : 0;
}

Shape shape_of(const DebertaConfig& c, const LayerParam& p, int span = 1) {
  const int64_t rows = span * dim(c, p.rows);
  return p.cols ? Shape{rows, dim(c, p.cols)} : Shape{rows};
}

}  // namespace

void add_deberta_params(const DebertaConfig& c, ParamTable& t) {
  const int64_t C = c.hidden_size;
  t.add(std::string(kEmb) + "word_embeddings.weight", {c.vocab_size, C});
  if (c.position_biased_input)
    t.add(std::string(kEmb) + "position_embeddings.weight", {c.max_position_embeddings, C});
  if (c.type_vocab_size > 0)
    t.add(std::string(kEmb) + "token_type_embeddings.weight", {c.type_vocab_size, C});
  t.add(std::string(kEmb) + "LayerNorm.weight", {C});
  t.add(std::string(kEmb) + "LayerNorm.bias", {C});
  for (int64_t l = 0; l < c.num_layers; ++l)
    each_layer_param(c, [&](const LayerParam& p) { t.add(layer_prefix(l) + p.name, shape_of(c, p)); });
  t.add(kRel, {c.rel_rows(), C});
  if (c.norm_rel_ebd) {
    t.add(std::string(kRelNorm) + "weight", {C});
    t.add(std::string(kRelNorm) + "bias", {C});
  }
  t.add("pooler.dense.weight", {C, C});
  t.add("pooler.dense.bias", {C});
  t.add("classifier.weight", {c.num_labels(), C});
  t.add("classifier.bias", {c.num_labels()});
}

DebertaWeights bind_deberta_weights(const DebertaConfig& c, const ParamViews& p) {
  DebertaWeights w;
  w.word = p.get(std::string(kEmb) + "word_embeddings.weight");
  w.position = p.get(std::string(kEmb) + "position_embeddings.weight");
  w.token_type = p.get(std::string(kEmb) + "token_type_embeddings.weight");
  w.emb_ln_w = p.get(std::string(kEmb) + "LayerNorm.weight");
  w.emb_ln_b = p.get(std::string(kEmb) + "LayerNorm.bias");
  w.layers.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l)
    each_layer_param(c, [&](const LayerParam& lp) {
      if (lp.view) w.layers[l].*lp.view = p.span(layer_prefix(l) + lp.name, shape_of(c, lp, lp.span));
    });
  w.rel = p.get(kRel);
  w.rel_ln_w = p.get(std::string(kRelNorm) + "weight");
  w.rel_ln_b = p.get(std::string(kRelNorm) + "bias");
  w.pool_w = p.get("pooler.dense.weight");
  w.pool_b = p.get("pooler.dense.bias");
  w.cls_w = p.get("classifier.weight");
  w.cls_b = p.get("classifier.bias");
  return w;
}

std::pair<int64_t, int64_t> deberta_layer_range(const DebertaConfig& c, const ParamTable& t) {
  if (c.num_layers == 0) return {0, 0};
  const int64_t begin = t.at(layer_prefix(0) + kQkv[0].name).offset;
  const ParamSpec& last = t.at(layer_prefix(c.num_layers - 1) + std::end(kRest)[-1].name);
  return {begin, last.offset + last.shape.numel() - begin};
}

std::vector<std::string> deberta_head_param_names() {
  return {"pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias"};
}

std::vector<AdapterSite> deberta_adapter_sites(const DebertaConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  std::vector<AdapterSite> sites;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int k = 0; k < kDebertaSites; ++k) {
      const auto s = static_cast<DebertaSite>(k);
      // The separate position projections exist without share_att_key, each for its term.
      if (s == DebertaSite::PosKey && (c.share_att_key || !c.c2p)) continue;
      if (s == DebertaSite::PosQuery && (c.share_att_key || !c.p2c)) continue;
      sites.push_back(AdapterSite{l, k, layer_prefix(l) + kSiteModules[k],
                                  s == DebertaSite::FfnOut ? F : C,
                                  s == DebertaSite::FfnIn ? F : C});
    }
  sites.push_back(deberta_pooler_site(c));
  return sites;
}

AdapterSite deberta_pooler_site(const DebertaConfig& c) {
  return AdapterSite{c.num_layers, 0, "pooler.dense", c.hidden_size, c.hidden_size};
}

std::vector<ClassifierModule> deberta_modules(int64_t layers, bool pos_key, bool pos_query) {
  const ModuleKind A = ModuleKind::Adaptable, O = ModuleKind::Other;
  std::vector<ClassifierModule> m = {{"", O},
                                     {"deberta", O},
                                     {"deberta.embeddings", O},
                                     {"deberta.embeddings.word_embeddings", ModuleKind::Embedding},
                                     {"deberta.embeddings.position_embeddings", ModuleKind::Embedding},
                                     {"deberta.embeddings.token_type_embeddings", ModuleKind::Embedding},
                                     {"deberta.embeddings.LayerNorm", O},
                                     {"deberta.embeddings.dropout", O},
                                     {"deberta.encoder", O},
                                     {"deberta.encoder.layer", O}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string q = fmt::format("deberta.encoder.layer.{}", l);
    std::vector<std::pair<const char*, ModuleKind>> layer = {
        {"", O},
        {".attention", O},
        {".attention.self", O},
        {".attention.self.query_proj", A},
        {".attention.self.key_proj", A},
        {".attention.self.value_proj", A},
        {".attention.self.pos_dropout", O}};
    if (pos_key) layer.push_back({".attention.self.pos_key_proj", A});
    if (pos_query) layer.push_back({".attention.self.pos_query_proj", A});
    for (const auto& [suffix, kind] : layer) m.push_back({q + suffix, kind});
    add_bert_layer_tail_modules(m, q);
  }
  for (const ClassifierModule& e : std::initializer_list<ClassifierModule>{
           {"deberta.encoder.rel_embeddings", ModuleKind::Embedding},
           {"deberta.encoder.LayerNorm", O},
           {"pooler", O},
           {"pooler.dense", A},
           {"pooler.dropout", O},
           {"classifier", ModuleKind::Head},
           {"dropout", O}})
    m.push_back(e);
  return m;
}

void deberta_buffers(const DebertaConfig& c, const BackboneShape& how, DebertaActs& a,
                     BufferTable& t) {
  const int64_t N = how.max_tokens > 0 ? how.max_tokens : how.max_rows * how.max_seq;
  const int64_t B = how.max_rows, T = how.max_seq, C = c.hidden_size, F = c.intermediate_size;
  const int64_t R = c.rel_rows(), K = c.num_labels();
  const DType f32 = DType::F32, h = how.compute;  // h: the GEMMs' activations
  const bool training = how.training, mixed = h != f32;
  const bool ckpt = training && how.checkpointing == GradientCheckpointing::On;
  a = DebertaActs{};
  a.checkpointing = ckpt;
  a.compute = h;
  a.first_token_last = how.first_token_head;
  a.layers.resize(c.num_layers);
  t.add("act/emb/sum", f32, {N, C}, &a.emb_sum);
  t.add("act/emb/mean", f32, {N}, &a.emb_mean);
  t.add("act/emb/rstd", f32, {N}, &a.emb_rstd);
  t.add("act/emb/out", f32, {N, C}, &a.emb_out);
  t.add("act/rel/norm", f32, {R, C}, &a.rel_norm);
  t.add("act/rel/mean", f32, {R}, &a.rel_mean);
  t.add("act/rel/rstd", f32, {R}, &a.rel_rstd);
  // Checkpointing keeps every layer's output and one slot for the rest (backward recomputes a
  // layer's forward into it).
  const LayerSlots slots(c.num_layers, training, ckpt);  // models/layers/layer_stack.h
  // Packed rows run the op one by one, their saved state back to back: sum L^2 <= N T on the CPU
  // (probabilities), sum (H + C) L = (H + C) N on CUDA (statistics and O); the workspace is one
  // row's (mixed precision: the CPU's per-thread fp32 blocks of the 16-bit tensors, or CUDA's
  // 16-bit tensor-core path's buffers; ops/disentangled_attention.h).
  const DisentangledBuffers att = disentangled_attention_buffers(
      c.attention(), how.device, how.packed ? (N + T - 1) / std::max<int64_t>(T, 1) : B, T, training,
      h);
  const int64_t work_rows = how.packed ? 1 : B;
  const int64_t att_workspace =
      disentangled_attention_buffers(c.attention(), how.device, work_rows, T, training, h).workspace;
  struct Slot {
    const char* what;
    DType dtype;
    Shape shape;
    TensorView DebertaLayerActs::*view;
  };
  // What runs past attention: in a slot only the first-token form's last layer uses, its rows are
  // the first tokens (max_rows), not the tokens.
  const auto past = [](TensorView DebertaLayerActs::*v) {
    return v == &DebertaLayerActs::attn || v == &DebertaLayerActs::sum1 ||
           v == &DebertaLayerActs::ln1 || v == &DebertaLayerActs::ln1_mean ||
           v == &DebertaLayerActs::ln1_rstd || v == &DebertaLayerActs::ffn_pre ||
           v == &DebertaLayerActs::ffn_act || v == &DebertaLayerActs::ffn_out ||
           v == &DebertaLayerActs::sum2 || v == &DebertaLayerActs::out ||
           v == &DebertaLayerActs::ln2_mean || v == &DebertaLayerActs::ln2_rstd ||
           v == &DebertaLayerActs::ln1_h;
  };
  const int64_t first_rows = std::min(N, B);
  const auto last_only = [&](int64_t s) {
    bool only = a.first_token_last;
    slots.each(s, [&](int64_t l) { only = only && l == c.num_layers - 1; });
    return only;
  };
  const Slot per_layer[] = {
      {"qkv", h, {N, 3 * C}, &DebertaLayerActs::qkv},       {"probs", f32, {att.saved}, &DebertaLayerActs::probs},
      {"ctx", h, {N, C}, &DebertaLayerActs::ctx},           {"attn", h, {N, C}, &DebertaLayerActs::attn},
      {"sum1", f32, {N, C}, &DebertaLayerActs::sum1},       {"ln1", f32, {N, C}, &DebertaLayerActs::ln1},
      {"ln1_mean", f32, {N}, &DebertaLayerActs::ln1_mean},  {"ln1_rstd", f32, {N}, &DebertaLayerActs::ln1_rstd},
      {"ffn_pre", h, {N, F}, &DebertaLayerActs::ffn_pre},   {"ffn_act", h, {N, F}, &DebertaLayerActs::ffn_act},
      {"ffn_out", h, {N, C}, &DebertaLayerActs::ffn_out},   {"sum2", f32, {N, C}, &DebertaLayerActs::sum2},
      {"out", f32, {N, C}, &DebertaLayerActs::out},         {"ln2_mean", f32, {N}, &DebertaLayerActs::ln2_mean},
      {"ln2_rstd", f32, {N}, &DebertaLayerActs::ln2_rstd},  {"rel_drop", f32, {R, C}, &DebertaLayerActs::rel_drop},
      {"pos_key", h, {R, C}, &DebertaLayerActs::pos_key},   {"pos_query", h, {R, C}, &DebertaLayerActs::pos_query},
  };
  // Mixed precision's 16-bit copies of the GEMMs' fp32 inputs.
  const Slot copies[] = {
      {"x_h", h, {N, C}, &DebertaLayerActs::x_h},
      {"ln1_h", h, {N, C}, &DebertaLayerActs::ln1_h},
      {"rel_h", h, {R, C}, &DebertaLayerActs::rel_h},
  };
  // Adapter buffers per kind: a content site's rows are the tokens, a positional kind's the 2S
  // relative embeddings (with share_att_key, key_proj's / query_proj's adapter runs there too).
  const AdapterConfig& ad = how.adapters;
  std::array<bool, kDebertaSites> adapted{};
  bool pooler_adapted = false;
  for (const AdapterSite& s : targeted_sites(deberta_adapter_sites(c), ad))
    (s.layer == c.num_layers ? pooler_adapted : adapted[s.kind]) = true;
  const auto key = static_cast<int>(DebertaSite::PosKey), query = static_cast<int>(DebertaSite::PosQuery);
  if (c.share_att_key) {
    adapted[key] = c.c2p && adapted[static_cast<int>(DebertaSite::Key)];
    adapted[query] = c.p2c && adapted[static_cast<int>(DebertaSite::Query)];
  }
  for (int64_t s = 0; s < slots.count(); ++s) {
    const bool first = last_only(s);
    const auto add = [&](const Slot& e) {
      Shape shape = e.shape;
      if (first && past(e.view)) shape[0] = first_rows;  // (N, ...) -> (B, ...)
      slots.add(t, a.layers, s, fmt::format("act/layer{}/{}", s, e.what), e.dtype, shape, e.view);
    };
    for (const Slot& e : per_layer)
      if (!ckpt || e.view != &DebertaLayerActs::out) add(e);
    if (mixed)
      for (const Slot& e : copies) add(e);
    for (int k = 0; k < kDebertaSites; ++k) {
      if (!adapted[k]) continue;
      const bool positional = k == key || k == query;
      const bool content_past = static_cast<DebertaSite>(k) == DebertaSite::AttnOut ||
                                static_cast<DebertaSite>(k) == DebertaSite::FfnIn ||
                                static_cast<DebertaSite>(k) == DebertaSite::FfnOut;
      const int64_t rows = positional ? R : first && content_past ? first_rows : N;
      const int64_t out = static_cast<DebertaSite>(k) == DebertaSite::FfnIn ? F : C;
      std::vector<AdapterSiteBuffers*> views;
      slots.each(s, [&](int64_t l) { views.push_back(&a.layers[l].adapter[k]); });
      add_adapter_site_buffers(t, fmt::format("act/layer{}/lora_u{}", s, k),
                               fmt::format("act/layer{}/dora_z{}", s, k), rows, out, ad, views);
    }
  }
  if (pooler_adapted) {
    add_adapter_site_buffers(t, "act/head/lora_u", "act/head/dora_z", B, C, ad, {&a.pool_adapter});
  }
  if (ad.enabled()) {
    const int64_t rows = std::max(N, R);
    if (training) add_adapter_h(t, "gradact/lora_h", rows, ad, a.adapter_scratch);
    add_adapter_dropout(t, "work/lora_dropout", {rows * std::max(C, F)}, ad, a.adapter_scratch);
  }
  if (mixed && ad.enabled()) {
    // fp32 copies for the LoRA branches: their 16-bit inputs (ctx, ln1_h, ffn_act; the QKV and
    // position sites read the fp32 x and rel), outputs (all 16-bit; 2S rows at the position
    // sites) and 16-bit input gradients (dctx, dffn), as wide as the widest adapted site needs.
    std::vector<AdapterStageNeed> needs;
    for (int k = 0; k < kDebertaSites; ++k) {
      if (!adapted[k]) continue;
      const DebertaSite site = static_cast<DebertaSite>(k);
      const int64_t rows = k == key || k == query ? R : N;
      const int64_t in = site == DebertaSite::FfnOut ? F : C;
      const bool x16 = site == DebertaSite::AttnOut || site == DebertaSite::FfnIn ||
                       site == DebertaSite::FfnOut;
      const bool dx16 = site == DebertaSite::AttnOut || site == DebertaSite::FfnOut;
      needs.push_back({x16 ? N * in : 0, rows * (site == DebertaSite::FfnIn ? F : C),
                       dx16 ? N * in : 0});
    }
    add_adapter_stages(t, "work/", needs, training, a.adapter_scratch);
  }
  if (ckpt)
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const bool first = a.first_token_last && l == c.num_layers - 1;
      t.add(fmt::format("act/layer{}/out", l), f32, {first ? first_rows : N, C}, &a.layers[l].out);
    }
  if (a.first_token_last) {
    t.add("act/first_token/ctx", h, {B, C}, &a.first_ctx);
    t.add("act/first_token/x", f32, {B, C}, &a.first_x);
    if (training) t.add("gradact/first_token/ctx", h, {B, C}, &a.first_dctx);
  }
  t.add("act/head/cls", f32, {B, C}, &a.cls);
  t.add("act/head/cls_drop", f32, {B, C}, &a.cls_drop);
  t.add("act/head/pool_pre", f32, {B, C}, &a.pool_pre);
  t.add("act/head/pooled", f32, {B, C}, &a.pooled);
  t.add("act/head/pooled_drop", f32, {B, C}, &a.pooled_drop);
  t.add("act/head/logits", f32, {B, K}, &a.logits);
  if (training) {
    t.add("gradact/out", f32, {N, C}, &a.grad_out);
    t.add("gradact/sum", f32, {N, C}, &a.grad_sum);
    t.add("gradact/tmp", h, {N, C}, &a.grad_tmp);
    t.add("gradact/ctx", h, {N, C}, &a.grad_ctx);
    t.add("gradact/ffn", h, {N, F}, &a.grad_ffn);
    t.add("gradact/qkv", h, {N, 3 * C}, &a.grad_qkv);
    if (mixed && (c.c2p || c.p2c)) t.add("gradact/pos_h", h, {R, C}, &a.grad_pos_h);
    t.add("gradact/pos_key", f32, {R, C}, &a.grad_pos_key);
    t.add("gradact/pos_query", f32, {R, C}, &a.grad_pos_query);
    t.add("gradact/rel_drop", f32, {R, C}, &a.grad_rel_drop);
    t.add("gradact/rel", f32, {R, C}, &a.grad_rel);
    t.add("gradact/rel_norm", f32, {R, C}, &a.grad_rel_norm);
    if (how.packed) {
      t.add("gradact/pos_key_row", f32, {R, C}, &a.grad_pos_key_row);
      t.add("gradact/pos_query_row", f32, {R, C}, &a.grad_pos_query_row);
    }
    t.add("gradact/pool_a", f32, {B, C}, &a.grad_pool_a);
    t.add("gradact/pool_b", f32, {B, C}, &a.grad_pool_b);
  }
  // The attention op's scratch, and in training the embeddings' sorted backward
  // (ops/embedding.h).
  int64_t ws = att_workspace;
  if (how.training) ws = std::max(ws, embedding_backward_workspace(how.device, N, C));
  t.add("work/deberta", f32, {std::max<int64_t>(ws, 1)}, &a.workspace);
}

}  // namespace ftune
