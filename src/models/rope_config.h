// A decoder's rotary embedding settings as config.json holds them, and the inverse frequencies
// HF's rope init functions compute from them (ops/rope.h applies them). Read from
// `rope_parameters` (transformers 5) or the legacy `rope_theta` + `rope_scaling` (with "type" or
// "rope_type"), plus `partial_rotary_factor`. Types: "default", "linear" (inv_freq / factor),
// "llama3" (Llama 3.1's banded scaling: low frequencies / factor, high kept, a smooth blend
// between); anything else is refused naming the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune {

struct RopeConfig {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;                   // linear, llama3
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_positions = 0;    // llama3
  double partial_rotary_factor = 1.0;

  // Parses the settings of config.json content; `max_positions` is its max_position_embeddings
  // (llama3's default original length).
  static RopeConfig from_config(const nlohmann::json& config, int64_t max_positions,
                                const std::string& path);
  // The rotated dims of a head: int(head_dim * partial_rotary_factor), even.
  int64_t rotary_dim(int64_t head_dim) const;
  // (rotary_dim / 2) inverse frequencies in fp32, as HF's init function computes them.
  std::vector<float> inv_freq(int64_t head_dim) const;
  // HF's attention_scaling of the cos / sin tables (1 for the types above).
  float attention_scaling() const { return 1.0f; }
};

}  // namespace ftune
