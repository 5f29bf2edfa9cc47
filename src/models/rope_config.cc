// RoPE settings and inverse frequencies (see rope_config.h).
#include "models/rope_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {
namespace {

// The rope settings object `scaling` (rope_parameters, one of its per-layer-type entries, or the
// legacy rope_scaling; possibly empty) with `theta` the base when it has no rope_theta.
RopeConfig parse_rope(const nlohmann::json& config, const nlohmann::json& scaling, double theta,
                      int64_t max_positions, const std::string& path, const std::string& where) {
  RopeConfig r;
  r.theta = io::get_optional_float(scaling, "rope_theta", where).value_or(theta);
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
  // The families' default init (Llama, Mistral, Qwen2/3, Gemma) rotates the whole head and
  // ignores partial_rotary_factor; the scaled types would rotate fewer dims, which their
  // attention cannot apply (HF fails on the shapes): refused.
  if (r.type == "default") {
    r.partial_rotary_factor = 1.0;
    return r;
  }
  if (r.partial_rotary_factor != 1.0)
    throw InputError(fmt::format(
        "{}: partial_rotary_factor {} with rope type '{}': HF's decoder attention rotates whole "
        "heads and cannot apply it",
        where, r.partial_rotary_factor, r.type));
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
  if (r.type == "dynamic") {
    r.factor = positive("factor");
    return r;
  }
  // yarn and longrope: the pretraining length (Phi-3 keeps it at the top of config.json).
  r.original_max_positions =
      io::get_optional_int(scaling, "original_max_position_embeddings", where)
          .value_or(io::get_optional_int(config, "original_max_position_embeddings", path)
                        .value_or(max_positions));
  if (r.original_max_positions <= 0)
    throw InputError(fmt::format("{}: original_max_position_embeddings must be positive", where));
  auto optional_positive = [&](const char* key) -> std::optional<double> {
    if (!io::get_optional_float(scaling, key, where)) return std::nullopt;
    return positive(key);
  };
  const double implied = static_cast<double>(max_positions) / r.original_max_positions;
  const std::optional<double> attention_factor = optional_positive("attention_factor");
  if (r.type == "yarn") {
    r.factor = scaling.contains("factor") && scaling["factor"].is_null() ? implied : positive("factor");
    r.beta_fast = optional_positive("beta_fast").value_or(32.0);
    r.beta_slow = optional_positive("beta_slow").value_or(1.0);
    r.truncate = io::get_optional_bool(scaling, "truncate", where).value_or(true);
    auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    const double m = io::get_optional_float(scaling, "mscale", where).value_or(0);
    const double m_all = io::get_optional_float(scaling, "mscale_all_dim", where).value_or(0);
    r.scaling = attention_factor ? *attention_factor
                : (m != 0 && m_all != 0) ? mscale(r.factor, m) / mscale(r.factor, m_all)
                                         : mscale(r.factor, 1);
    return r;
  }
  if (r.type == "longrope") {
    r.factor = optional_positive("factor").value_or(implied);
    auto factors = [&](const char* key) {
      if (!scaling.contains(key) || !scaling[key].is_array())
        throw InputError(fmt::format("{}: longrope needs '{}', a list of numbers", where, key));
      std::vector<double> f;
      for (const auto& v : scaling[key]) {
        if (!v.is_number() || !(v.get<double>() > 0))
          throw InputError(fmt::format("{}: '{}' must hold positive numbers", where, key));
        f.push_back(v.get<double>());
      }
      return f;
    };
    r.short_factor = factors("short_factor");
    r.long_factor = factors("long_factor");
    r.scaling = attention_factor ? *attention_factor
                : r.factor <= 1.0
                    ? 1.0
                    : std::sqrt(1 + std::log(r.factor) / std::log(double(r.original_max_positions)));
    return r;
  }
  throw InputError(fmt::format(
      "{}: rope type '{}' is not supported; expected default, linear, dynamic, llama3, yarn or "
      "longrope",
      where, r.type));
}

}  // namespace

RopeConfig RopeConfig::from_config(const nlohmann::json& config, int64_t max_positions,
                                   const std::string& path) {
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
  const double theta = io::get_optional_float(config, "rope_theta", path).value_or(10000.0);
  return parse_rope(config, scaling, theta, max_positions, path, where);
}

RopeConfig RopeConfig::for_layer_type(const nlohmann::json& config, const std::string& layer_type,
                                      int64_t max_positions, const std::string& path) {
  const bool full = layer_type == "full_attention";
  const nlohmann::json empty = nlohmann::json::object();
  // transformers 5: rope_parameters {"full_attention": {...}, "sliding_attention": {...}}.
  if (config.contains("rope_parameters") && config["rope_parameters"].is_object() &&
      config["rope_parameters"].contains(layer_type)) {
    const nlohmann::json& p = config["rope_parameters"][layer_type];
    const std::string where = path + ": rope_parameters." + layer_type;
    if (!p.is_object() && !p.is_null())
      throw InputError(fmt::format("{}: expected an object, got {}", where, io::json_type_name(p)));
    return parse_rope(config, p.is_object() ? p : empty, full ? 1000000.0 : 10000.0,
                      max_positions, path, where);
  }
  // Legacy Gemma 3: rope_theta + rope_scaling for the global layers, rope_local_base_freq (no
  // scaling) for the local ones.
  if (!full)
    return parse_rope(config, empty,
                      io::get_optional_float(config, "rope_local_base_freq", path).value_or(10000.0),
                      max_positions, path, path + ": rope_local_base_freq");
  const bool scaled = config.contains("rope_scaling") && config["rope_scaling"].is_object();
  return parse_rope(config, scaled ? config["rope_scaling"] : empty,
                    io::get_optional_float(config, "rope_theta", path).value_or(1000000.0),
                    max_positions, path, path + ": rope_scaling");
}

int64_t RopeConfig::rotary_dim(int64_t head_dim) const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

std::vector<float> RopeConfig::inv_freq(int64_t head_dim, bool long_seq) const {
  const int64_t dim = rotary_dim(head_dim);
  const size_t half = static_cast<size_t>(dim / 2);
  // torch: base ** (arange(0, dim, 2).float() / dim), in fp32.
  std::vector<float> pos(half), inv(half);
  for (size_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos[i] = std::pow(static_cast<float>(theta), e);
    inv[i] = 1.0f / pos[i];
  }
  if (type == "longrope") {
    const std::vector<double>& ext = long_seq ? long_factor : short_factor;
    if (ext.size() != half)
      throw InputError(fmt::format("longrope: {} factors for a rotary dim of {} (expected {})",
                                   ext.size(), dim, half));
    for (size_t i = 0; i < half; ++i) inv[i] = 1.0f / (static_cast<float>(ext[i]) * pos[i]);
  }
  if (type == "yarn") {
    // HF's find_correction_range in double, the ramp and the blend in fp32.
    auto correction_dim = [&](double rotations) {
      return dim * std::log(original_max_positions / (rotations * 2 * M_PI)) / (2 * std::log(theta));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    if (truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    const float f = static_cast<float>(factor);
    for (size_t i = 0; i < half; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) /
                                        static_cast<float>(high - low),
                                    0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float interpolated = 1.0f / (f * pos[i]);
      inv[i] = interpolated * (1.0f - extrapolation) + inv[i] * extrapolation;
    }
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
