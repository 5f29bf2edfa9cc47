// LoRA / DoRA adapters on the encoder's linear layers: which modules get one, their parameters
// under PEFT's names, PEFT's initialisation, and the frozen-weight caches DoRA reads.
//
// Parameters (names as PEFT's state dict without its "base_model.model." prefix):
//   <module>.lora_A.weight          (r, in)   kaiming_uniform(a = sqrt(5)): U(-1/sqrt(in),
//   1/sqrt(in)) <module>.lora_B.weight          (out, r)  zeros <module>.lora_magnitude_vector
//   (out)     DoRA only: ||W_o|| at initialisation
// with <module> e.g. "bert.encoder.layer.3.attention.self.value", or BERT's "bert.pooler.dense"
// (which the classification head runs: models/classification_head.h). Which modules get one is
// PEFT's rule (models/adapter_config.h). The math is in ops/lora.h.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/arena.h"
#include "models/adapter_config.h"
#include "models/encoder_config.h"
#include "models/param_table.h"

namespace ftune {

// The adaptable linear layers of one encoder layer, in PEFT's naming order.
enum class AdapterSite { Query, Key, Value, AttnOut, FfnIn, FfnOut };
constexpr int kAdapterSites = 6;

const char* adapter_site_suffix(AdapterSite site);  // "attention.self.query", ...
std::string adapter_module_name(const EncoderConfig& config, int64_t layer, AdapterSite site);
int64_t adapter_in_features(const EncoderConfig& config, AdapterSite site);
int64_t adapter_out_features(const EncoderConfig& config, AdapterSite site);

struct AdapterWeights {
  TensorView a, b, magnitude;  // (r, in), (out, r), (out) for DoRA
  bool defined() const { return a.defined(); }
};

// The adapters of the whole encoder, plus the settings the forward and backward passes need.
struct EncoderAdapters {
  bool dora = false;
  float scale = 1.0f;
  float dropout = 0.0f;
  int64_t r = 0;
  std::vector<std::array<AdapterWeights, kAdapterSites>> layers;  // empty without adapters
  // DoRA caches (per layer and site): ||W_o||^2 of the frozen weight and the current norms.
  std::vector<std::array<TensorView, kAdapterSites>> weight_sq, norm;
  TensorView norm_workspace;
  // BERT's bert.pooler.dense, when targeted: its adapter, the frozen weight it sits on (bound by
  // the classifier) and its DoRA caches.
  AdapterWeights pooler;
  TensorView pooler_weight, pooler_weight_sq, pooler_norm;
  bool any() const { return !layers.empty(); }
  const AdapterWeights& at(int64_t layer, AdapterSite s) const {
    return layers[layer][static_cast<int>(s)];
  }
};

// The pooler's module name, and whether `adapters` puts an adapter on it (BERT only).
constexpr const char* kPoolerModule = "bert.pooler.dense";
bool pooler_adapted(const EncoderConfig& config, const AdapterConfig& adapters);

// Adds the adapter parameters of every targeted module to `table`, layer by layer, then the
// pooler's. InputError when target_modules names what PEFT or ftune cannot adapt
// (resolve_target_modules).
void add_adapter_params(const EncoderConfig& config, const AdapterConfig& adapters,
                        ParamTable& table);
// Views of the adapter parameters (or their gradients) in `flat`, laid out by `table`.
EncoderAdapters bind_adapters(const EncoderConfig& config, const AdapterConfig& adapters,
                              const ParamTable& table, TensorView flat);
// The DoRA caches, planned per targeted module ("adapter/..." buffers).
void plan_adapter_caches(const EncoderConfig& config, const AdapterConfig& adapters,
                         ArenaPlan& plan);
void bind_adapter_caches(const EncoderConfig& config, const Arena& arena, EncoderAdapters& a);

// PEFT's initialisation: A ~ U(-1/sqrt(in), 1/sqrt(in)) from a seeded std::mt19937_64, B = 0,
// magnitude = row norms of the frozen weight (which must be loaded first). Reproducible in ftune,
// not equal to torch's draws.
struct EncoderWeights;
void init_adapters(const EncoderAdapters& adapters, const EncoderWeights& frozen, uint64_t seed);

// Recomputes the DoRA caches ||W_o||^2 from the frozen weights: after loading or changing them.
void refresh_adapter_caches(const EncoderAdapters& adapters, const EncoderWeights& frozen);

// The frozen weight (out, in) an adapter sits on: part of the fused QKV matrix for q, k, v.
TensorView adapted_weight(const EncoderWeights& w, int64_t layer, AdapterSite site);
TensorView adapted_bias(const EncoderWeights& w, int64_t layer, AdapterSite site);

// Philox site of an adapter's input dropout.
inline uint32_t adapter_dropout_site(int64_t layer, AdapterSite site) {
  return static_cast<uint32_t>(0x20000 + 8 * layer + static_cast<int>(site));
}

}  // namespace ftune
