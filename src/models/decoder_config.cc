// Decoder configs from config.json (see decoder_config.h): the variants' table, then one parser.
#include "models/decoder_config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "io/json_file.h"
#include "models/config_fields.h"

namespace ftune {
namespace {

// What distinguishes the variants (the rest is read from the same keys for all).
struct Variant {
  const char* model_type;
  const char* architecture;
  bool qkv_bias;         // q/k/v biases always (Qwen2)
  bool attention_bias;   // reads attention_bias: q/k/v/o biases (Llama)
  bool mlp_bias;         // reads mlp_bias (Llama)
  bool sliding_all;      // sliding_window on every layer when set (Mistral)
  bool sliding_by_type;  // layer_types / use_sliding_window pick the sliding layers (Qwen2)
  bool qk_norm;          // q_norm / k_norm per head (Qwen3)
};

constexpr Variant kVariants[] = {
    {"llama", "LlamaForSequenceClassification", false, true, true, false, false, false},
    {"mistral", "MistralForSequenceClassification", false, false, false, true, false, false},
    {"qwen2", "Qwen2ForSequenceClassification", true, false, false, false, true, false},
    {"qwen3", "Qwen3ForSequenceClassification", false, true, false, false, true, true},
};

const Variant* find_variant(const std::string& type) {
  for (const Variant& v : kVariants)
    if (type == v.model_type) return &v;
  return nullptr;
}

// An id key that may be an integer, a list of integers (its first one) or null / missing (-1).
int64_t token_id(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return -1;
  const nlohmann::json& v = j[key].is_array() && !j[key].empty() ? j[key][0] : j[key];
  if (!v.is_number_integer())
    throw InputError(fmt::format("{}: key '{}' must be a token id, got {}", path, key,
                                 io::json_type_name(v)));
  return v.get<int64_t>();
}

// Per layer: 0 (full attention) or the sliding window W.
std::vector<int64_t> layer_windows(const Variant& v, const nlohmann::json& j, int64_t layers,
                                   const std::string& path) {
  std::vector<int64_t> window(layers, 0);
  const std::optional<int64_t> w = io::get_optional_int(j, "sliding_window", path);
  if (!w) return window;
  if (*w <= 0)
    throw InputError(fmt::format("{}: key 'sliding_window' must be positive or null, got {}", path, *w));
  if (v.sliding_all) return std::vector<int64_t>(layers, *w);
  if (!v.sliding_by_type || !io::get_optional_bool(j, "use_sliding_window", path).value_or(false))
    return window;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    if (static_cast<int64_t>(types.size()) != layers)
      throw InputError(fmt::format("{}: layer_types has {} entries for {} layers", path,
                                   types.size(), layers));
    for (int64_t l = 0; l < layers; ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        throw InputError(fmt::format(
            "{}: layer_types[{}] must be 'full_attention' or 'sliding_attention'", path, l));
      if (t == "sliding_attention") window[l] = *w;
    }
    return window;
  }
  // Qwen2 before layer_types: layers from max_window_layers on slide.
  const int64_t from = io::get_optional_int(j, "max_window_layers", path).value_or(layers);
  for (int64_t l = std::max<int64_t>(0, from); l < layers; ++l) window[l] = *w;
  return window;
}

}  // namespace

const std::vector<std::string>& decoder_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const Variant& v : kVariants) t.push_back(v.model_type);
    return t;
  }();
  return types;
}

DecoderConfig DecoderConfig::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  const std::string type = io::get_string(j, "model_type", path);
  const Variant* v = find_variant(type);
  if (!v) throw InputError(fmt::format("{}: model_type '{}' is not a decoder ftune reads", path, type));
  DecoderConfig c;
  c.raw = j;
  c.model_type = v->model_type;
  c.architecture = v->architecture;
  c.vocab_size = config_size(j, "vocab_size", path);
  c.hidden_size = config_size(j, "hidden_size", path);
  c.num_layers = config_size(j, "num_hidden_layers", path);
  c.num_heads = config_size(j, "num_attention_heads", path);
  c.num_kv_heads = config_size(j, "num_key_value_heads", path, c.num_heads);
  c.intermediate_size = config_size(j, "intermediate_size", path);
  c.max_position_embeddings = config_size(j, "max_position_embeddings", path, 2048);
  if (c.num_layers > kConfigMaxLayers)
    throw InputError(fmt::format("{}: num_hidden_layers {} is more than the {} ftune supports",
                                 path, c.num_layers, kConfigMaxLayers));
  if (c.num_heads % c.num_kv_heads != 0)
    throw InputError(fmt::format(
        "{}: num_key_value_heads {} does not divide num_attention_heads {}", path,
        c.num_kv_heads, c.num_heads));
  if (!j.contains("head_dim") || j["head_dim"].is_null()) {
    if (c.hidden_size % c.num_heads != 0)
      throw InputError(fmt::format(
          "{}: hidden_size {} is not a multiple of num_attention_heads {} (and no head_dim)", path,
          c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  } else {
    c.head_dim = config_size(j, "head_dim", path);
  }
  c.rms_norm_eps = config_real(j, "rms_norm_eps", 1e-6, false, path);
  c.attention_dropout = config_real(j, "attention_dropout", 0.0, true, path);
  c.initializer_range = config_real(j, "initializer_range", 0.02, false, path);
  c.activation = glu_act_from_hf(io::get_optional_string(j, "hidden_act", path).value_or("silu"),
                                 path + ": hidden_act");
  c.qkv_bias = v->qkv_bias;
  c.qk_norm = v->qk_norm;
  if (v->attention_bias) c.qkv_bias = c.o_bias = io::get_optional_bool(j, "attention_bias", path).value_or(false);
  if (v->mlp_bias) c.mlp_bias = io::get_optional_bool(j, "mlp_bias", path).value_or(false);
  if (io::get_optional_int(j, "pretraining_tp", path).value_or(1) != 1)
    throw InputError(fmt::format("{}: pretraining_tp other than 1 is not supported", path));
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.window = layer_windows(*v, j, c.num_layers, path);
  c.rope = RopeConfig::from_config(j, c.max_position_embeddings, path);
  const int64_t rot = c.rope.rotary_dim(c.head_dim);
  if (rot < 2 || rot % 2 != 0)
    throw InputError(fmt::format(
        "{}: RoPE rotates {} dims of head_dim {}: HF's rotary embedding needs an even count >= 2",
        path, rot, c.head_dim));
  c.pad_token_id = token_id(j, "pad_token_id", path);
  c.embedding_padding_idx = c.pad_token_id;
  if (c.pad_token_id < 0) {
    c.pad_token_id = token_id(j, "eos_token_id", path);
    c.pad_from_eos = c.pad_token_id >= 0;
  }
  if (c.pad_token_id >= c.vocab_size)
    throw InputError(fmt::format("{}: pad token id {} outside the vocabulary of {}", path,
                                 c.pad_token_id, c.vocab_size));
  c.id2label = config_labels(j, path);
  const double C = c.hidden_size, F = c.intermediate_size, K = c.num_labels();
  const double params = double(c.vocab_size) * C +
                        c.num_layers * (C * double(c.qkv_size()) + c.q_size() * C + 3 * C * F +
                                        2 * C + c.qkv_size()) +
                        C + K * C;
  check_param_count(params, path,
                    fmt::format("vocab_size {}, hidden_size {}, num_hidden_layers {}, "
                                "intermediate_size {}",
                                c.vocab_size, c.hidden_size, c.num_layers, c.intermediate_size));
  return c;
}

nlohmann::json DecoderConfig::to_json() const {
  return config_with_labels(raw, model_type, architecture, id2label);
}

}  // namespace ftune
