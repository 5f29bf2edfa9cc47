// RoPE settings and inverse frequencies (see rope_config.h).
#include "models/rope_config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {

RopeConfig RopeConfig::from_config(const nlohmann::json& config, int64_t max_positions,
                                   const std::string& path) {
  RopeConfig r;
  // transformers 5 writes one rope_parameters object (rope_theta inside); older configs have
  // rope_theta at the top and rope_scaling (null without scaling).
  const bool modern = config.contains("rope_parameters") && config["rope_parameters"].is_object();
  const std::string where = path + (modern ? ": rope_parameters" : ": rope_scaling");
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& scaling =
      modern ? config["rope_parameters"]
             : (config.contains("rope_scaling") && config["rope_scaling"].is_object()
                    ? config["rope_scaling"]
                    : empty);
  const double top_theta = io::get_optional_float(config, "rope_theta", path).value_or(10000.0);
  r.theta = modern ? io::get_optional_float(scaling, "rope_theta", where).value_or(top_theta)
                   : top_theta;
  r.type = io::get_optional_string(scaling, "rope_type", where)
               .value_or(io::get_optional_string(scaling, "type", where).value_or("default"));
  r.partial_rotary_factor =
      io::get_optional_float(scaling, "partial_rotary_factor", where)
          .value_or(io::get_optional_float(config, "partial_rotary_factor", path).value_or(1.0));
  if (!(r.theta > 0) || !std::isfinite(r.theta))
    throw InputError(fmt::format("{}: rope_theta must be positive, got {}", where, r.theta));
  if (!(r.partial_rotary_factor > 0 && r.partial_rotary_factor <= 1))
    throw InputError(fmt::format("{}: partial_rotary_factor must be in (0, 1], got {}", where,
                                 r.partial_rotary_factor));
  auto positive = [&](const char* key) {
    const double v = io::get_float(scaling, key, where);
    if (!(v > 0) || !std::isfinite(v))
      throw InputError(fmt::format("{}: '{}' must be positive, got {}", where, key, v));
    return v;
  };
  if (r.type == "default") return r;
  if (r.type == "linear") {
    r.factor = positive("factor");
    return r;
  }
  if (r.type == "llama3") {
    r.factor = positive("factor");
    r.low_freq_factor = positive("low_freq_factor");
    r.high_freq_factor = positive("high_freq_factor");
    r.original_max_positions = io::get_optional_int(scaling, "original_max_position_embeddings", where)
                                   .value_or(max_positions);
    if (r.original_max_positions <= 0 || r.high_freq_factor <= r.low_freq_factor)
      throw InputError(fmt::format(
          "{}: llama3 needs original_max_position_embeddings > 0 and high_freq_factor > "
          "low_freq_factor",
          where));
    return r;
  }
  throw InputError(fmt::format(
      "{}: rope type '{}' is not supported yet; expected default, linear or llama3", where, r.type));
}

int64_t RopeConfig::rotary_dim(int64_t head_dim) const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

std::vector<float> RopeConfig::inv_freq(int64_t head_dim) const {
  const int64_t dim = rotary_dim(head_dim);
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), e);
  }
  if (type == "linear")
    for (float& f : inv) f /= static_cast<float>(factor);
  if (type == "llama3") {
    const float old_len = static_cast<float>(original_max_positions);
    const float low_wavelen = static_cast<float>(original_max_positions / low_freq_factor);
    const float high_wavelen = static_cast<float>(original_max_positions / high_freq_factor);
    const float f = static_cast<float>(factor), lo = static_cast<float>(low_freq_factor),
                hi = static_cast<float>(high_freq_factor);
    for (float& v : inv) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / v;
      float scaled = wavelen > low_wavelen ? v / f : v;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_len / wavelen - lo) / (hi - lo);
        scaled = (1.0f - smooth) * scaled / f + smooth * scaled;
      }
      v = scaled;
    }
  }
  return inv;
}

}  // namespace ftune
