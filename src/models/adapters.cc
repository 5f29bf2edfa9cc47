// Adapter parameters, PEFT's initialisation and the DoRA caches (see adapters.h).
#include "models/adapters.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/memory.h"
#include "models/encoder.h"
#include "ops/lora.h"

namespace ftune {
namespace {

std::string cache_name(const char* what, int64_t layer, AdapterSite s) {
  return fmt::format("adapter/{}/{}/{}", what, layer, static_cast<int>(s));
}

AdapterSite site_at(int i) {
  return static_cast<AdapterSite>(i);
}

}  // namespace

const char* adapter_site_suffix(AdapterSite s) {
  switch (s) {
    case AdapterSite::Query:
      return "attention.self.query";
    case AdapterSite::Key:
      return "attention.self.key";
    case AdapterSite::Value:
      return "attention.self.value";
    case AdapterSite::AttnOut:
      return "attention.output.dense";
    case AdapterSite::FfnIn:
      return "intermediate.dense";
    case AdapterSite::FfnOut:
      return "output.dense";
  }
  return "?";
}

std::string adapter_module_name(const EncoderConfig& c, int64_t layer, AdapterSite s) {
  return fmt::format("{}.encoder.layer.{}.{}", c.weight_prefix(), layer, adapter_site_suffix(s));
}

int64_t adapter_in_features(const EncoderConfig& c, AdapterSite s) {
  return s == AdapterSite::FfnOut ? c.intermediate_size : c.hidden_size;
}

int64_t adapter_out_features(const EncoderConfig& c, AdapterSite s) {
  return s == AdapterSite::FfnIn ? c.intermediate_size : c.hidden_size;
}

bool pooler_adapted(const EncoderConfig& c, const AdapterConfig& ac) {
  return ac.enabled() && c.family == ModelFamily::Bert && ac.targets(kPoolerModule);
}

void add_adapter_params(const EncoderConfig& c, const AdapterConfig& ac, ParamTable& t) {
  if (!ac.enabled()) return;
  // The rank may come from a downloaded adapter_config.json: bound the adapters' size (a double
  // cannot overflow) before the table sums it in int64, as config.json bounds the model's.
  double total = 0;
  for (int i = 0; i < kAdapterSites; ++i)
    total += double(ac.r) *
             (adapter_in_features(c, site_at(i)) + adapter_out_features(c, site_at(i)) + 1);
  total = total * c.num_layers + double(ac.r) * (2 * c.hidden_size + 1);  // and the pooler
  if (total > 1099511627776.0)  // 2^40, config.json's bound on the model
    throw InputError(fmt::format(
        "adapters of rank {} on this model would have up to {:.3g} parameters, more than the 2^40 "
        "ftune supports",
        ac.r, total));
  resolve_target_modules(ac, classifier_modules(c.family == ModelFamily::Bert, c.num_layers),
                         "peft");
  const auto add = [&](const std::string& m, int64_t in, int64_t out) {
    t.add(m + ".lora_A.weight", {ac.r, in});
    t.add(m + ".lora_B.weight", {out, ac.r});
    if (ac.dora()) t.add(m + ".lora_magnitude_vector", {out});
  };
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int i = 0; i < kAdapterSites; ++i) {
      const std::string m = adapter_module_name(c, l, site_at(i));
      if (ac.targets(m))
        add(m, adapter_in_features(c, site_at(i)), adapter_out_features(c, site_at(i)));
    }
  if (pooler_adapted(c, ac)) add(kPoolerModule, c.hidden_size, c.hidden_size);
}

namespace {

AdapterWeights bind_module(const std::string& m, bool dora, const ParamTable& t, TensorView flat) {
  AdapterWeights w;
  if (!t.find(m + ".lora_A.weight")) return w;
  w.a = ParamTable::slice(flat, t.at(m + ".lora_A.weight"));
  w.b = ParamTable::slice(flat, t.at(m + ".lora_B.weight"));
  if (dora) w.magnitude = ParamTable::slice(flat, t.at(m + ".lora_magnitude_vector"));
  return w;
}

}  // namespace

EncoderAdapters bind_adapters(const EncoderConfig& c, const AdapterConfig& ac, const ParamTable& t,
                              TensorView flat) {
  EncoderAdapters a;
  if (!ac.enabled()) return a;
  a.dora = ac.dora();
  a.scale = ac.scaling();
  a.dropout = static_cast<float>(ac.dropout);
  a.r = ac.r;
  a.layers.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int i = 0; i < kAdapterSites; ++i)
      a.layers[l][i] = bind_module(adapter_module_name(c, l, site_at(i)), a.dora, t, flat);
  a.pooler = bind_module(kPoolerModule, a.dora, t, flat);
  return a;
}

void plan_adapter_caches(const EncoderConfig& c, const AdapterConfig& ac, ArenaPlan& plan) {
  if (!ac.dora()) return;
  int64_t widest = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int i = 0; i < kAdapterSites; ++i) {
      if (!ac.targets(adapter_module_name(c, l, site_at(i)))) continue;
      const int64_t out = adapter_out_features(c, site_at(i));
      plan.add(cache_name("weight_sq", l, site_at(i)), DType::F32, {out});
      plan.add(cache_name("norm", l, site_at(i)), DType::F32, {out});
      widest = std::max(widest, out);
    }
  if (pooler_adapted(c, ac)) {
    plan.add("adapter/weight_sq/pooler", DType::F32, {c.hidden_size});
    plan.add("adapter/norm/pooler", DType::F32, {c.hidden_size});
    widest = std::max(widest, c.hidden_size);
  }
  plan.add("adapter/norm_workspace", DType::F32, {dora_norms_workspace(widest, ac.r)});
}

void bind_adapter_caches(const EncoderConfig& c, const Arena& arena, EncoderAdapters& a) {
  if (!a.dora) return;
  a.weight_sq.assign(c.num_layers, {});
  a.norm.assign(c.num_layers, {});
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int i = 0; i < kAdapterSites; ++i) {
      if (!a.layers[l][i].defined()) continue;
      a.weight_sq[l][i] = arena.view(cache_name("weight_sq", l, site_at(i)));
      a.norm[l][i] = arena.view(cache_name("norm", l, site_at(i)));
    }
  if (a.pooler.defined()) {
    a.pooler_weight_sq = arena.view("adapter/weight_sq/pooler");
    a.pooler_norm = arena.view("adapter/norm/pooler");
  }
  a.norm_workspace = arena.view("adapter/norm_workspace");
}

namespace {

// The weight (or bias) of the linear an adapter site sits on; Q, K and V are row blocks of the
// fused QKV projection.
TensorView site_param(const EncoderWeights& w, int64_t layer, AdapterSite s, bool bias) {
  const LayerWeights& lw = w.layers[layer];
  switch (s) {
    case AdapterSite::Query:
    case AdapterSite::Key:
    case AdapterSite::Value: {
      const int64_t C = lw.qkv_w.dim(1), part = static_cast<int64_t>(s);
      return (bias ? lw.qkv_b : lw.qkv_w).slice0(part * C, (part + 1) * C);
    }
    case AdapterSite::AttnOut:
      return bias ? lw.attn_out_b : lw.attn_out_w;
    case AdapterSite::FfnIn:
      return bias ? lw.ffn_in_b : lw.ffn_in_w;
    case AdapterSite::FfnOut:
      return bias ? lw.ffn_out_b : lw.ffn_out_w;
  }
  return {};
}

}  // namespace

TensorView adapted_weight(const EncoderWeights& w, int64_t layer, AdapterSite s) {
  return site_param(w, layer, s, /*bias=*/false);
}

TensorView adapted_bias(const EncoderWeights& w, int64_t layer, AdapterSite s) {
  return site_param(w, layer, s, /*bias=*/true);
}

void refresh_adapter_caches(const EncoderAdapters& a, const EncoderWeights& w) {
  if (!a.dora) return;
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (int i = 0; i < kAdapterSites; ++i)
      if (a.layers[l][i].defined())
        row_sq_norms(a.weight_sq[l][i], adapted_weight(w, static_cast<int64_t>(l), site_at(i)));
  if (a.pooler.defined()) row_sq_norms(a.pooler_weight_sq, a.pooler_weight);
}

namespace {

// kaiming_uniform_(a=sqrt(5)) for A (gain sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / fan_in)),
// B = 0, and for DoRA the magnitude ||W|| (= ||W + s B A|| with B = 0: PEFT's initial one).
void init_module(const AdapterWeights& aw, const TensorView& frozen, std::mt19937_64& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(aw.a.dim(1)));
  std::uniform_real_distribution<double> u(-bound, bound);
  HostTensor host(DType::F32, aw.a.shape);
  for (int64_t k = 0; k < host.numel(); ++k) host.data<float>()[k] = static_cast<float>(u(rng));
  copy(aw.a, host.view());
  fill_zero(aw.b);
  if (!aw.magnitude.defined()) return;
  row_sq_norms(aw.magnitude, frozen);
  HostTensor m(DType::F32, aw.magnitude.shape);
  copy(m.view(), aw.magnitude);
  for (int64_t k = 0; k < m.numel(); ++k) m.data<float>()[k] = std::sqrt(m.data<float>()[k]);
  copy(aw.magnitude, m.view());
}

}  // namespace

void init_adapters(const EncoderAdapters& a, const EncoderWeights& w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (int i = 0; i < kAdapterSites; ++i)
      if (a.layers[l][i].defined())
        init_module(a.layers[l][i], adapted_weight(w, static_cast<int64_t>(l), site_at(i)), rng);
  if (a.pooler.defined()) init_module(a.pooler, a.pooler_weight, rng);
}

}  // namespace ftune
