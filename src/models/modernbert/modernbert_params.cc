// The ModernBERT family's parameters under HF's names, their views, adapter sites, named modules and
// initialisation (see modernbert.h). Biases follow attention_bias (Wqkv, attn.Wo), mlp_bias (Wi,
// mlp.Wo), norm_bias (every LayerNorm) and classifier_bias (head.dense); the classifier always has
// one. Layer 0 has no attn_norm (HF's Identity).
#include <fmt/format.h>

#include <cmath>

#include "core/memory.h"
#include "models/modernbert/modernbert.h"

namespace ftune {
namespace {

std::string layer_name(int64_t l, const char* module, const char* what) {
  return fmt::format("model.layers.{}.{}.{}", l, module, what);
}

void add_norm(ParamTable& t, const std::string& module, int64_t C, bool bias) {
  t.add(module + ".weight", {C});
  if (bias) t.add(module + ".bias", {C});
}

}  // namespace

const char* modernbert_site_suffix(ModernBertSite site) {
  switch (site) {
    case ModernBertSite::Wqkv: return "attn.Wqkv";
    case ModernBertSite::AttnWo: return "attn.Wo";
    case ModernBertSite::Wi: return "mlp.Wi";
    case ModernBertSite::MlpWo: return "mlp.Wo";
  }
  return "?";
}

std::vector<AdapterSite> modernbert_adapter_sites(const ModernBertConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const std::pair<int64_t, int64_t> dims[kModernBertSites] = {{C, 3 * C}, {C, C}, {C, 2 * F}, {F, C}};
  std::vector<AdapterSite> sites;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int k = 0; k < kModernBertSites; ++k)
      sites.push_back(AdapterSite{
          l, k, fmt::format("model.layers.{}.{}", l, modernbert_site_suffix(static_cast<ModernBertSite>(k))),
          dims[k].first, dims[k].second});
  sites.push_back(AdapterSite{c.num_layers, 0, "head.dense", C, C});
  return sites;
}

std::vector<ClassifierModule> modernbert_modules(int64_t layers) {
  const ModuleKind A = ModuleKind::Adaptable, O = ModuleKind::Other;
  std::vector<ClassifierModule> m = {{"", O},
                                     {"model", O},
                                     {"model.embeddings", O},
                                     {"model.embeddings.tok_embeddings", ModuleKind::Embedding},
                                     {"model.embeddings.norm", O},
                                     {"model.embeddings.drop", O},
                                     {"model.layers", O}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    const std::pair<const char*, ModuleKind> layer[] = {
        {"", O},          {".attn_norm", O}, {".attn", O},     {".attn.Wqkv", A},
        {".attn.Wo", A},  {".attn.out_drop", O}, {".mlp_norm", O}, {".mlp", O},
        {".mlp.Wi", A},   {".mlp.act", O},   {".mlp.drop", O}, {".mlp.Wo", A}};
    for (const auto& [suffix, kind] : layer) m.push_back({p + suffix, kind});
  }
  for (const char* o : {"model.final_norm", "model.rotary_emb", "head"}) m.push_back({o, O});
  m.push_back({"head.dense", A});
  for (const char* o : {"head.act", "head.norm", "drop"}) m.push_back({o, O});
  m.push_back({"classifier", ModuleKind::Head});
  return m;
}

void add_modernbert_params(const ModernBertConfig& c, ParamTable& t) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  t.add("model.embeddings.tok_embeddings.weight", {c.vocab_size, C});
  add_norm(t, "model.embeddings.norm", C, c.norm_bias);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (l > 0) add_norm(t, fmt::format("model.layers.{}.attn_norm", l), C, c.norm_bias);
    t.add(layer_name(l, "attn.Wqkv", "weight"), {3 * C, C});
    if (c.attention_bias) t.add(layer_name(l, "attn.Wqkv", "bias"), {3 * C});
    t.add(layer_name(l, "attn.Wo", "weight"), {C, C});
    if (c.attention_bias) t.add(layer_name(l, "attn.Wo", "bias"), {C});
    add_norm(t, fmt::format("model.layers.{}.mlp_norm", l), C, c.norm_bias);
    t.add(layer_name(l, "mlp.Wi", "weight"), {2 * F, C});
    if (c.mlp_bias) t.add(layer_name(l, "mlp.Wi", "bias"), {2 * F});
    t.add(layer_name(l, "mlp.Wo", "weight"), {C, F});
    if (c.mlp_bias) t.add(layer_name(l, "mlp.Wo", "bias"), {C});
  }
  add_norm(t, "model.final_norm", C, c.norm_bias);
  t.add("head.dense.weight", {C, C});
  if (c.classifier_bias) t.add("head.dense.bias", {C});
  add_norm(t, "head.norm", C, c.norm_bias);
  t.add("classifier.weight", {c.num_labels(), C});
  t.add("classifier.bias", {c.num_labels()});
}

ModernBertWeights bind_modernbert_weights(const ModernBertConfig& c, const ParamViews& p) {
  ModernBertWeights w;
  w.embed = p.get("model.embeddings.tok_embeddings.weight");
  w.emb_norm_w = p.get("model.embeddings.norm.weight");
  w.emb_norm_b = p.get("model.embeddings.norm.bias");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ModernBertLayerWeights lw;
    lw.attn_norm_w = p.get(layer_name(l, "attn_norm", "weight"));
    lw.attn_norm_b = p.get(layer_name(l, "attn_norm", "bias"));
    lw.qkv_w = p.get(layer_name(l, "attn.Wqkv", "weight"));
    lw.qkv_b = p.get(layer_name(l, "attn.Wqkv", "bias"));
    lw.o_w = p.get(layer_name(l, "attn.Wo", "weight"));
    lw.o_b = p.get(layer_name(l, "attn.Wo", "bias"));
    lw.mlp_norm_w = p.get(layer_name(l, "mlp_norm", "weight"));
    lw.mlp_norm_b = p.get(layer_name(l, "mlp_norm", "bias"));
    lw.wi_w = p.get(layer_name(l, "mlp.Wi", "weight"));
    lw.wi_b = p.get(layer_name(l, "mlp.Wi", "bias"));
    lw.wo_w = p.get(layer_name(l, "mlp.Wo", "weight"));
    lw.wo_b = p.get(layer_name(l, "mlp.Wo", "bias"));
    w.layers.push_back(lw);
  }
  w.final_norm_w = p.get("model.final_norm.weight");
  w.final_norm_b = p.get("model.final_norm.bias");
  w.dense_w = p.get("head.dense.weight");
  w.dense_b = p.get("head.dense.bias");
  w.head_norm_w = p.get("head.norm.weight");
  w.head_norm_b = p.get("head.norm.bias");
  w.cls_w = p.get("classifier.weight");
  w.cls_b = p.get("classifier.bias");
  return w;
}

std::pair<int64_t, int64_t> modernbert_layer_range(const ModernBertConfig& c, const ParamTable& t) {
  const ParamSpec& first = t.at(layer_name(0, "attn.Wqkv", "weight"));
  const ParamSpec& last = t.at(layer_name(c.num_layers - 1, "mlp.Wo", c.mlp_bias ? "bias" : "weight"));
  return {first.offset, last.offset + last.shape.numel() - first.offset};
}

void init_modernbert_param(const ModernBertConfig& c, const ParamSpec& spec, TensorView dst,
                           std::mt19937_64& rng) {
  // HF: trunc_normal_(mean 0, std, a = -cutoff std, b = cutoff std) per module: "in" std
  // initializer_range (embeddings, Wqkv, Wi), "out" std / sqrt(2 L) (attn.Wo, mlp.Wo,
  // head.dense), "final_out" hidden^-0.5 (classifier); biases 0, LayerNorms 1 (and bias 0). The
  // embedding's padding row is not zeroed: HF's truncated normal overwrites nn.Embedding's zeros.
  HostTensor host(DType::F32, spec.shape);
  float* v = host.data<float>();
  const std::string& n = spec.name;
  const bool bias = n.ends_with(".bias");
  const bool norm = n.find("norm.") != std::string::npos;
  double sigma = c.initializer_range;
  if (n.find(".Wo.") != std::string::npos || n.rfind("head.dense.", 0) == 0)
    sigma = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  else if (n.rfind("classifier.", 0) == 0)
    sigma = 1.0 / std::sqrt(static_cast<double>(c.hidden_size));
  const double cut = c.initializer_cutoff_factor * sigma;
  std::normal_distribution<double> normal(0.0, sigma);
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (bias || norm) {
      v[i] = bias ? 0.0f : 1.0f;
      continue;
    }
    double x = normal(rng);
    while (x < -cut || x > cut) x = normal(rng);  // rejection: the truncated normal
    v[i] = static_cast<float>(x);
  }
  copy(dst, host.view());
}

}  // namespace ftune
