// The decoder family's parameters under HF's names, their views, adapter sites, named modules and
// initialisation (see decoder.h). Table order per layer puts the fused blocks side by side:
// q, k, v weights (then their biases), o, gate and up weights (then biases), down, the norms
// (Gemma's four: input, post-attention, pre- and post-feedforward).
#include <fmt/format.h>

#include "core/memory.h"
#include "models/decoder/decoder.h"

namespace ftune {
namespace {

std::string layer_name(const DecoderConfig& c, int64_t l, const char* module, const char* what) {
  return fmt::format("{}layers.{}.{}.{}", c.prefix, l, module, what);
}

}  // namespace

const char* decoder_site_suffix(DecoderSite site) {
  switch (site) {
    case DecoderSite::Q: return "self_attn.q_proj";
    case DecoderSite::K: return "self_attn.k_proj";
    case DecoderSite::V: return "self_attn.v_proj";
    case DecoderSite::O: return "self_attn.o_proj";
    case DecoderSite::Gate: return "mlp.gate_proj";
    case DecoderSite::Up: return "mlp.up_proj";
    case DecoderSite::Down: return "mlp.down_proj";
  }
  return "?";
}

std::vector<AdapterSite> decoder_adapter_sites(const DecoderConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  // (in, out) of q, k, v, o, gate, up, down.
  const std::pair<int64_t, int64_t> dims[kDecoderSites] = {
      {C, c.q_size()}, {C, c.kv_size()}, {C, c.kv_size()}, {c.q_size(), C}, {C, F}, {C, F}, {F, C}};
  std::vector<AdapterSite> sites;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int k = 0; k < kDecoderSites; ++k)
      sites.push_back(AdapterSite{
          l, k,
          fmt::format("{}layers.{}.{}", c.prefix, l, decoder_site_suffix(static_cast<DecoderSite>(k))),
          dims[k].first, dims[k].second});
  return sites;
}

std::vector<ClassifierModule> decoder_modules(int64_t layers, bool qk_norm, bool sandwich_norms,
                                              const std::string& prefix, bool causal_lm) {
  const ModuleKind A = ModuleKind::Adaptable, O = ModuleKind::Other;
  const std::string base = prefix.substr(0, prefix.size() - 1);  // "model", "model.language_model"
  std::vector<ClassifierModule> m = {{"", O}, {"model", O}};
  // The multimodal Gemma 3: its vision tower and projector are listed without their children,
  // as parts ftune does not run (text-only input never reaches them; load_peft_adapter ignores
  // an adapter's tensors there, by name).
  if (base != "model")
    for (const char* x : {"model.vision_tower", "model.multi_modal_projector"}) m.push_back({x, O});
  if (base != "model") m.push_back({base, O});
  for (const ClassifierModule& x : std::vector<ClassifierModule>{
           {prefix + "embed_tokens", ModuleKind::Embedding}, {prefix + "layers", O}})
    m.push_back(x);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("{}layers.{}", prefix, l);
    const std::pair<const char*, ModuleKind> layer[] = {
        {"", O},           {".self_attn", O},         {".self_attn.q_proj", A},
        {".self_attn.k_proj", A}, {".self_attn.v_proj", A}, {".self_attn.o_proj", A},
        {".mlp", O},       {".mlp.gate_proj", A},     {".mlp.up_proj", A},
        {".mlp.down_proj", A},    {".mlp.act_fn", O},       {".input_layernorm", O},
        {".post_attention_layernorm", O}};
    for (const auto& [suffix, kind] : layer) m.push_back({p + suffix, kind});
    if (qk_norm)
      for (const char* n : {".self_attn.q_norm", ".self_attn.k_norm"}) m.push_back({p + n, O});
    if (sandwich_norms)
      for (const char* n : {".pre_feedforward_layernorm", ".post_feedforward_layernorm"})
        m.push_back({p + n, O});
  }
  for (const char* o : {"norm", "rotary_emb"}) m.push_back({prefix + o, O});
  m.push_back(causal_lm ? ClassifierModule{"lm_head", ModuleKind::Output}
                        : ClassifierModule{"score", ModuleKind::Head});
  return m;
}

void add_decoder_params(const DecoderConfig& c, ParamTable& t) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, Q = c.q_size(), KV = c.kv_size();
  t.add(c.prefix + "embed_tokens.weight", {c.vocab_size, C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    t.add(layer_name(c, l, "self_attn.q_proj", "weight"), {Q, C});
    t.add(layer_name(c, l, "self_attn.k_proj", "weight"), {KV, C});
    t.add(layer_name(c, l, "self_attn.v_proj", "weight"), {KV, C});
    if (c.qkv_bias) {
      t.add(layer_name(c, l, "self_attn.q_proj", "bias"), {Q});
      t.add(layer_name(c, l, "self_attn.k_proj", "bias"), {KV});
      t.add(layer_name(c, l, "self_attn.v_proj", "bias"), {KV});
    }
    t.add(layer_name(c, l, "self_attn.o_proj", "weight"), {C, Q});
    if (c.o_bias) t.add(layer_name(c, l, "self_attn.o_proj", "bias"), {C});
    t.add(layer_name(c, l, "mlp.gate_proj", "weight"), {F, C});
    t.add(layer_name(c, l, "mlp.up_proj", "weight"), {F, C});
    if (c.mlp_bias) {
      t.add(layer_name(c, l, "mlp.gate_proj", "bias"), {F});
      t.add(layer_name(c, l, "mlp.up_proj", "bias"), {F});
    }
    t.add(layer_name(c, l, "mlp.down_proj", "weight"), {C, F});
    if (c.mlp_bias) t.add(layer_name(c, l, "mlp.down_proj", "bias"), {C});
    if (c.qk_norm) {
      t.add(layer_name(c, l, "self_attn.q_norm", "weight"), {c.head_dim});
      t.add(layer_name(c, l, "self_attn.k_norm", "weight"), {c.head_dim});
    }
    t.add(layer_name(c, l, "input_layernorm", "weight"), {C});
    t.add(layer_name(c, l, "post_attention_layernorm", "weight"), {C});
    if (c.sandwich_norms) {
      t.add(layer_name(c, l, "pre_feedforward_layernorm", "weight"), {C});
      t.add(layer_name(c, l, "post_feedforward_layernorm", "weight"), {C});
    }
  }
  t.add(c.prefix + "norm.weight", {C});
  if (!c.causal_lm)
    t.add("score.weight", {c.num_labels(), C});
  else if (!c.tie_word_embeddings)
    t.add("lm_head.weight", {c.vocab_size, C});  // tied: embed_tokens is the head
}

DecoderWeights bind_decoder_weights(const DecoderConfig& c, const ParamViews& p) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, QKV = c.qkv_size();
  DecoderWeights w;
  w.embed = p.get(c.prefix + "embed_tokens.weight");
  w.final_norm = p.get(c.prefix + "norm.weight");
  if (!c.causal_lm) w.score = p.get("score.weight");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    DecoderLayerWeights lw;
    lw.qkv_w = p.span(layer_name(c, l, "self_attn.q_proj", "weight"), {QKV, C});
    if (c.qkv_bias) lw.qkv_b = p.span(layer_name(c, l, "self_attn.q_proj", "bias"), {QKV});
    lw.o_w = p.get(layer_name(c, l, "self_attn.o_proj", "weight"));
    lw.o_b = p.get(layer_name(c, l, "self_attn.o_proj", "bias"));
    lw.gu_w = p.span(layer_name(c, l, "mlp.gate_proj", "weight"), {2 * F, C});
    if (c.mlp_bias) lw.gu_b = p.span(layer_name(c, l, "mlp.gate_proj", "bias"), {2 * F});
    lw.down_w = p.get(layer_name(c, l, "mlp.down_proj", "weight"));
    lw.down_b = p.get(layer_name(c, l, "mlp.down_proj", "bias"));
    lw.in_norm = p.get(layer_name(c, l, "input_layernorm", "weight"));
    // Llama's post_attention_layernorm is the MLP's input norm; Gemma's normalises the attention
    // output, and pre_feedforward_layernorm is the MLP's input norm.
    const TensorView post_attention = p.get(layer_name(c, l, "post_attention_layernorm", "weight"));
    if (c.sandwich_norms) {
      lw.attn_out_norm = post_attention;
      lw.post_norm = p.get(layer_name(c, l, "pre_feedforward_layernorm", "weight"));
      lw.mlp_out_norm = p.get(layer_name(c, l, "post_feedforward_layernorm", "weight"));
    } else {
      lw.post_norm = post_attention;
    }
    lw.q_norm = p.get(layer_name(c, l, "self_attn.q_norm", "weight"));
    lw.k_norm = p.get(layer_name(c, l, "self_attn.k_norm", "weight"));
    w.layers.push_back(lw);
  }
  return w;
}

std::pair<int64_t, int64_t> decoder_layer_range(const DecoderConfig& c, const ParamTable& t) {
  const ParamSpec& first = t.at(layer_name(c, 0, "self_attn.q_proj", "weight"));
  const ParamSpec& last =
      t.at(layer_name(c, c.num_layers - 1,
                      c.sandwich_norms ? "post_feedforward_layernorm" : "post_attention_layernorm",
                      "weight"));
  return {first.offset, last.offset + last.shape.numel() - first.offset};
}

void init_decoder_param(const DecoderConfig& c, const ParamSpec& spec, TensorView dst,
                        std::mt19937_64& rng) {
  HostTensor host(DType::F32, spec.shape);
  float* v = host.data<float>();
  const bool norm = spec.name.find("norm") != std::string::npos;
  const bool bias = spec.name.ends_with(".bias");
  std::normal_distribution<float> normal(0.0f, c.initializer_range);
  for (int64_t i = 0; i < host.numel(); ++i)
    v[i] = norm ? 1.0f - c.norm_offset : bias ? 0.0f : normal(rng);
  if (spec.name == c.prefix + "embed_tokens.weight" && c.embedding_padding_idx >= 0)
    for (int64_t j = 0; j < c.hidden_size; ++j) v[c.embedding_padding_idx * c.hidden_size + j] = 0;
  copy(dst, host.view());
}

}  // namespace ftune
