// LoRA / DoRA adapters on a model's linear layers, for any family: which modules get one (the
// family's adapter sites, models/backbone.h, matched against PEFT's target_modules), their
// parameters under PEFT's names, PEFT's initialisation, and the frozen-weight caches DoRA reads.
//
// Parameters (names as PEFT's state dict without its "base_model.model." prefix):
//   <module>.lora_A.weight          (r, in)   kaiming_uniform(a = sqrt(5)): U(-1/sqrt(in), 1/sqrt(in))
//   <module>.lora_B.weight          (out, r)  zeros
//   <module>.lora_magnitude_vector  (out)     DoRA only: ||W_o|| at initialisation
// with <module> e.g. "bert.encoder.layer.3.attention.self.value". The math is in ops/lora.h.
#pragma once

#include <string>
#include <vector>

#include "core/arena.h"
#include "models/adapter_config.h"
#include "models/backbone.h"
#include "models/param_table.h"

namespace ftune {

// The sites `adapters` targets (all of them when it is enabled and matches; none otherwise).
std::vector<AdapterSite> targeted_sites(const std::vector<AdapterSite>& sites,
                                        const AdapterConfig& adapters);
// Adds the adapter parameters of every targeted site to `table`, site by site.
void add_adapter_params(const std::vector<AdapterSite>& sites, const AdapterConfig& adapters,
                        ParamTable& table);
// Views of the adapter parameters (or their gradients) in `flat`, laid out by `table`; with
// `frozen` (the base values), each adapter's frozen weight and bias too.
AdapterSet bind_adapters(const std::vector<AdapterSite>& sites, const AdapterConfig& adapters,
                         const ParamTable& table, TensorView flat,
                         const ParamViews* frozen = nullptr);
// The DoRA caches, planned per targeted module ("adapter/..." buffers), and their views.
void plan_adapter_caches(const std::vector<AdapterSite>& sites, const AdapterConfig& adapters,
                         ArenaPlan& plan);
void bind_adapter_caches(const std::vector<AdapterSite>& sites, const Arena& arena, AdapterSet& a);

// PEFT's initialisation: A ~ U(-1/sqrt(in), 1/sqrt(in)) from a seeded std::mt19937_64, B = 0,
// magnitude = row norms of the frozen weight (which must be loaded first). Reproducible in ftune,
// not equal to torch's draws.
void init_adapters(const AdapterSet& adapters, uint64_t seed);
// Recomputes the DoRA caches ||W_o||^2 from the frozen weights: after loading or changing them.
void refresh_adapter_caches(const AdapterSet& adapters);

// Philox site of an adapter's input dropout.
inline uint32_t adapter_dropout_site(int64_t layer, int kind) {
  return static_cast<uint32_t>(0x20000 + 8 * layer + kind);
}

}  // namespace ftune
