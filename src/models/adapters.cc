// Adapter parameters, PEFT's initialisation and the DoRA caches (see adapters.h).
#include "models/adapters.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/memory.h"
#include "ops/lora.h"

namespace ftune {
namespace {

std::string cache_name(const char* what, const AdapterSite& s) {
  return fmt::format("adapter/{}/{}/{}", what, s.layer, s.kind);
}

// Layers x kinds of a site list (the shape of AdapterSet::layers).
std::pair<int64_t, int> grid(const std::vector<AdapterSite>& sites) {
  int64_t layers = 0;
  int kinds = 0;
  for (const AdapterSite& s : sites) {
    layers = std::max(layers, s.layer + 1);
    kinds = std::max(kinds, s.kind + 1);
  }
  return {layers, kinds};
}

}  // namespace

std::vector<AdapterSite> targeted_sites(const std::vector<AdapterSite>& sites,
                                        const AdapterConfig& ac) {
  std::vector<AdapterSite> out;
  if (!ac.enabled()) return out;
  for (const AdapterSite& s : sites)
    if (ac.targets(s.module)) out.push_back(s);
  return out;
}

void add_adapter_params(const std::vector<AdapterSite>& sites, const AdapterConfig& ac,
                        ParamTable& t) {
  // The rank may come from a downloaded adapter_config.json: bound the adapters' size (a double
  // cannot overflow) before the table sums it in int64, as config.json bounds the model's.
  double total = 0;
  for (const AdapterSite& s : sites) total += double(ac.r) * double(s.in + s.out + 1);
  if (ac.enabled() && total > 1099511627776.0)  // 2^40, config.json's bound on the model
    throw InputError(fmt::format(
        "adapters of rank {} on this model would have up to {:.3g} parameters, more than the 2^40 "
        "ftune supports",
        ac.r, total));
  for (const AdapterSite& s : targeted_sites(sites, ac)) {
    t.add(s.module + ".lora_A.weight", {ac.r, s.in});
    t.add(s.module + ".lora_B.weight", {s.out, ac.r});
    if (ac.dora()) t.add(s.module + ".lora_magnitude_vector", {s.out});
  }
}

AdapterSet bind_adapters(const std::vector<AdapterSite>& sites, const AdapterConfig& ac,
                         const ParamTable& t, TensorView flat, const ParamViews* frozen) {
  AdapterSet a;
  if (!ac.enabled()) return a;
  a.dora = ac.dora();
  a.scale = ac.scaling();
  a.dropout = static_cast<float>(ac.dropout);
  a.r = ac.r;
  const auto [layers, kinds] = grid(sites);
  a.layers.assign(layers, std::vector<AdapterWeights>(kinds));
  for (const AdapterSite& s : sites) {
    const std::string& m = s.module;
    if (!t.find(m + ".lora_A.weight")) continue;
    AdapterWeights& w = a.layers[s.layer][s.kind];
    w.a = ParamTable::slice(flat, t.at(m + ".lora_A.weight"));
    w.b = ParamTable::slice(flat, t.at(m + ".lora_B.weight"));
    if (a.dora) w.magnitude = ParamTable::slice(flat, t.at(m + ".lora_magnitude_vector"));
    if (frozen) {
      w.frozen = frozen->get(m + ".weight");
      w.frozen_bias = frozen->get(m + ".bias");
    }
  }
  return a;
}

void plan_adapter_caches(const std::vector<AdapterSite>& sites, const AdapterConfig& ac,
                         ArenaPlan& plan) {
  if (!ac.dora()) return;
  int64_t widest = 0;
  for (const AdapterSite& s : targeted_sites(sites, ac)) {
    plan.add(cache_name("weight_sq", s), DType::F32, {s.out});
    plan.add(cache_name("norm", s), DType::F32, {s.out});
    widest = std::max(widest, s.out);
  }
  plan.add("adapter/norm_workspace", DType::F32, {dora_norms_workspace(widest, ac.r)});
}

void bind_adapter_caches(const std::vector<AdapterSite>& sites, const Arena& arena,
                         AdapterSet& a) {
  if (!a.dora) return;
  const auto [layers, kinds] = grid(sites);
  a.weight_sq.assign(layers, std::vector<TensorView>(kinds));
  a.norm.assign(layers, std::vector<TensorView>(kinds));
  for (const AdapterSite& s : sites) {
    if (!a.at(s.layer, s.kind).defined()) continue;
    a.weight_sq[s.layer][s.kind] = arena.view(cache_name("weight_sq", s));
    a.norm[s.layer][s.kind] = arena.view(cache_name("norm", s));
  }
  a.norm_workspace = arena.view("adapter/norm_workspace");
}

void refresh_adapter_caches(const AdapterSet& a) {
  if (!a.dora) return;
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (size_t k = 0; k < a.layers[l].size(); ++k)
      if (a.layers[l][k].defined()) row_sq_norms(a.weight_sq[l][k], a.layers[l][k].frozen);
}

void init_adapters(const AdapterSet& a, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (size_t k = 0; k < a.layers[l].size(); ++k) {
      const AdapterWeights& aw = a.layers[l][k];
      if (!aw.defined()) continue;
      // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / fan_in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(aw.a.dim(1)));
      std::uniform_real_distribution<double> u(-bound, bound);
      HostTensor host(DType::F32, aw.a.shape);
      for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = static_cast<float>(u(rng));
      copy(aw.a, host.view());
      fill_zero(aw.b);
      if (aw.magnitude.defined()) {
        // B = 0, so ||W + s B A|| = ||W||: PEFT's initial magnitude.
        row_sq_norms(aw.magnitude, aw.frozen);
        HostTensor m(DType::F32, aw.magnitude.shape);
        copy(m.view(), aw.magnitude);
        for (int64_t i = 0; i < m.numel(); ++i) m.data<float>()[i] = std::sqrt(m.data<float>()[i]);
        copy(aw.magnitude, m.view());
      }
    }
}

}  // namespace ftune
