// A decoder's rotary embedding settings as config.json holds them, and the inverse frequencies and
// attention scaling HF's ROPE_INIT_FUNCTIONS compute from them (ops/rope.h applies them). Read
// from `rope_parameters` (transformers 5; Gemma 3 nests one per layer type) or the legacy
// `rope_theta` + `rope_scaling` (with "type" or "rope_type"); `partial_rotary_factor` is ignored by
// the default type, as these families' HF code does, and refused with the others. Types:
//   default   1 / theta^(2i / R)
//   linear    default / factor
//   dynamic   NTK-aware: HF grows theta only for sequences longer than max_position_embeddings,
//             which ftune never feeds (inputs are cut there), so it computes the default's values
//   llama3    Llama 3.1's bands: low frequencies / factor, high kept, a smooth blend between
//   yarn      YaRN: interpolation (/ factor) and extrapolation blended over the dims between the
//             beta_fast / beta_slow correction range; attention_scaling from attention_factor or
//             0.1 ln(factor) + 1 (mscale / mscale_all_dim)
//   longrope  Phi-3's per-dim short_factor / long_factor (the long set when the batch's positions
//             reach past original_max_position_embeddings, as HF's dynamic update picks);
//             attention_scaling sqrt(1 + ln(factor) / ln(original length)) unless given
// anything else is refused naming the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune {

struct RopeConfig {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;                   // linear, dynamic, llama3, yarn, longrope
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_positions = 0;    // llama3, yarn, longrope
  double beta_fast = 32, beta_slow = 1;  // yarn
  bool truncate = true;                  // yarn: integer correction range
  std::vector<double> short_factor, long_factor;  // longrope, rotary_dim / 2 each
  double scaling = 1.0;                  // HF's attention_scaling (yarn, longrope)
  double partial_rotary_factor = 1.0;

  // Parses the settings of config.json content; `max_positions` is its max_position_embeddings
  // (llama3's default original length).
  static RopeConfig from_config(const nlohmann::json& config, int64_t max_positions,
                                const std::string& path);
  // Gemma 3's settings of the layers of `layer_type` ("full_attention" or "sliding_attention"):
  // rope_parameters[layer_type] (transformers 5), or the legacy rope_theta + rope_scaling (full)
  // and rope_local_base_freq (sliding); HF's defaults 1e6 and 1e4.
  static RopeConfig for_layer_type(const nlohmann::json& config, const std::string& layer_type,
                                   int64_t max_positions, const std::string& path);
  // The rotated dims of a head: int(head_dim * partial_rotary_factor), even.
  int64_t rotary_dim(int64_t head_dim) const;
  // (rotary_dim / 2) inverse frequencies in fp32, as HF's init function computes them; `long_seq`:
  // longrope's long factors (a batch whose positions pass original_max_positions).
  std::vector<float> inv_freq(int64_t head_dim, bool long_seq = false) const;
  // Whether a batch of `seq_len` positions needs inv_freq(head_dim, true) (longrope only).
  bool uses_long_factors(int64_t seq_len) const {
    return type == "longrope" && seq_len > original_max_positions;
  }
  // HF's attention_scaling of the cos / sin tables, as the fp32 factor they are multiplied by.
  float attention_scaling() const { return static_cast<float>(scaling); }
};

}  // namespace ftune
