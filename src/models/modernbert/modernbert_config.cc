// ModernBERT configs from config.json (see modernbert_config.h).
#include "models/modernbert/modernbert_config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/config_fields.h"

namespace ftune {
namespace {

// Per layer: full attention or the local window. layer_types when present, else HF's rule from
// global_attn_every_n_layers (default 3): layer l is global when l % n == 0.
std::vector<bool> global_layers(const nlohmann::json& j, int64_t layers, const std::string& path) {
  std::vector<bool> global(layers, false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const nlohmann::json& types = j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
      throw InputError(fmt::format("{}: layer_types must list {} layer types", path, layers));
    for (int64_t l = 0; l < layers; ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        throw InputError(fmt::format(
            "{}: layer_types[{}] must be 'full_attention' or 'sliding_attention'", path, l));
      global[l] = t == "full_attention";
    }
    return global;
  }
  const int64_t n = config_size(j, "global_attn_every_n_layers", path, 3);
  for (int64_t l = 0; l < layers; ++l) global[l] = l % n == 0;
  return global;
}

// The RoPE of one layer type: rope_parameters[type] (transformers 5), else the legacy theta key.
RopeConfig layer_rope(const nlohmann::json& j, const char* type, const char* legacy_key,
                      double legacy_default, int64_t max_positions, const std::string& path) {
  nlohmann::json sub = nlohmann::json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
      j["rope_parameters"].contains(type) && j["rope_parameters"][type].is_object()) {
    sub["rope_parameters"] = j["rope_parameters"][type];
    return RopeConfig::from_config(sub, max_positions, fmt::format("{}: rope_parameters.{}", path, type));
  }
  sub["rope_theta"] = io::get_optional_float(j, legacy_key, path).value_or(legacy_default);
  return RopeConfig::from_config(sub, max_positions, path);
}

bool flag(const nlohmann::json& j, const char* key, const std::string& path) {
  return io::get_optional_bool(j, key, path).value_or(false);
}

}  // namespace

ModernBertConfig ModernBertConfig::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  const std::string type = io::get_string(j, "model_type", path);
  if (type != "modernbert")
    throw InputError(fmt::format("{}: model_type '{}' is not modernbert", path, type));
  ModernBertConfig c;
  c.raw = j;
  c.vocab_size = config_size(j, "vocab_size", path, 50368);
  c.hidden_size = config_size(j, "hidden_size", path, 768);
  c.num_layers = config_size(j, "num_hidden_layers", path, 22);
  c.num_heads = config_size(j, "num_attention_heads", path, 12);
  c.intermediate_size = config_size(j, "intermediate_size", path, 1152);
  c.max_position_embeddings = config_size(j, "max_position_embeddings", path, 8192);
  if (c.num_layers > kConfigMaxLayers)
    throw InputError(fmt::format("{}: num_hidden_layers {} is more than the {} ftune supports",
                                 path, c.num_layers, kConfigMaxLayers));
  if (c.hidden_size % c.num_heads != 0)
    throw InputError(fmt::format(
        "{}: hidden_size {} is not a multiple of num_attention_heads {}", path, c.hidden_size,
        c.num_heads));
  c.head_dim = c.hidden_size / c.num_heads;
  if (c.head_dim % 2 != 0)
    throw InputError(fmt::format("{}: head_dim {} (hidden_size / num_attention_heads) must be even "
                                 "for the rotary embedding",
                                 path, c.head_dim));
  c.norm_eps = config_real(j, "norm_eps", 1e-5, false, path);
  c.norm_bias = flag(j, "norm_bias", path);
  c.attention_bias = flag(j, "attention_bias", path);
  c.mlp_bias = flag(j, "mlp_bias", path);
  c.classifier_bias = flag(j, "classifier_bias", path);
  c.activation = glu_act_from_hf(io::get_optional_string(j, "hidden_activation", path).value_or("gelu"),
                                 path + ": hidden_activation");
  c.classifier_activation = gelu_form_from_hf(
      io::get_optional_string(j, "classifier_activation", path).value_or("gelu"),
      path + ": classifier_activation");
  const std::string pooling = io::get_optional_string(j, "classifier_pooling", path).value_or("cls");
  if (pooling != "cls" && pooling != "mean")
    throw InputError(fmt::format("{}: classifier_pooling must be 'cls' or 'mean', got '{}'", path, pooling));
  c.pooling = pooling == "cls" ? ModernBertPooling::Cls : ModernBertPooling::Mean;
  c.local_attention = io::get_optional_int(j, "local_attention", path).value_or(128);
  if (c.local_attention < 0)
    throw InputError(fmt::format("{}: local_attention must be >= 0, got {}", path, c.local_attention));
  c.global = global_layers(j, c.num_layers, path);
  c.global_rope = layer_rope(j, "full_attention", "global_rope_theta", 160000.0,
                             c.max_position_embeddings, path);
  c.local_rope = layer_rope(j, "sliding_attention", "local_rope_theta", 10000.0,
                            c.max_position_embeddings, path);
  for (const RopeConfig* r : {&c.global_rope, &c.local_rope})
    if (r->partial_rotary_factor != 1.0)
      throw InputError(fmt::format("{}: ModernBERT rotates whole heads; partial_rotary_factor {} is "
                                   "not supported",
                                   path, r->partial_rotary_factor));
  const std::optional<int64_t> pad = io::get_optional_int(j, "pad_token_id", path);
  c.pad_token_id = pad.value_or(-1);
  if (c.pad_token_id >= c.vocab_size)
    throw InputError(fmt::format("{}: pad token id {} outside the vocabulary of {}", path,
                                 c.pad_token_id, c.vocab_size));
  c.embedding_dropout = config_real(j, "embedding_dropout", 0.0, true, path);
  c.attention_dropout = config_real(j, "attention_dropout", 0.0, true, path);
  c.mlp_dropout = config_real(j, "mlp_dropout", 0.0, true, path);
  c.classifier_dropout = config_real(j, "classifier_dropout", 0.0, true, path);
  c.initializer_range = config_real(j, "initializer_range", 0.02, false, path);
  c.initializer_cutoff_factor = config_real(j, "initializer_cutoff_factor", 2.0, false, path);
  if (j.contains("initializer_cutoff_factor") && j["initializer_cutoff_factor"].is_null())
    c.initializer_cutoff_factor = 3.0f;  // HF: None -> 3
  c.id2label = config_labels(j, path);
  const double C = c.hidden_size, F = c.intermediate_size, K = c.num_labels();
  const double params = double(c.vocab_size) * C + c.num_layers * (4 * C * C + 3 * C * F) + C * C + K * C;
  check_param_count(params, path,
                    fmt::format("vocab_size {}, hidden_size {}, num_hidden_layers {}, "
                                "intermediate_size {}",
                                c.vocab_size, c.hidden_size, c.num_layers, c.intermediate_size));
  return c;
}

nlohmann::json ModernBertConfig::to_json() const {
  return config_with_labels(raw, "modernbert", "ModernBertForSequenceClassification", id2label);
}

}  // namespace ftune
