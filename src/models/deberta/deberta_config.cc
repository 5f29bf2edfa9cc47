// config.json parsing for DeBERTa-v2 / v3 (see deberta_config.h); every error names the file and
// key.
#include "models/deberta/deberta_config.h"

#include "models/config_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "io/json_file.h"
#include "models/config_fields.h"

namespace ftune {
namespace {

constexpr int64_t kMaxSize = INT32_MAX;
constexpr int64_t kMaxLayers = 4096;

// pos_att_type as a list, or the legacy "p2c|c2p" string (lower-cased, split on '|').
std::vector<std::string> pos_att_types(const nlohmann::json& j, const std::string& path) {
  std::vector<std::string> out;
  if (!j.contains("pos_att_type") || j["pos_att_type"].is_null()) return out;
  const nlohmann::json& v = j["pos_att_type"];
  auto add = [&](std::string s) {
    s.erase(0, s.find_first_not_of(" \t"));
    s.erase(s.find_last_not_of(" \t") + 1);
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    out.push_back(s);
  };
  if (v.is_string()) {
    std::stringstream in(v.get<std::string>());
    for (std::string part; std::getline(in, part, '|');) add(part);
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_string())
        throw InputError(fmt::format("{}: pos_att_type entries must be strings", path));
      add(e.get<std::string>());
    }
  } else {
    throw InputError(fmt::format("{}: pos_att_type must be a list or a 'p2c|c2p' string", path));
  }
  for (const std::string& t : out)
    if (t != "c2p" && t != "p2c")
      throw InputError(fmt::format(
          "{}: pos_att_type '{}' is not supported; expected c2p and / or p2c", path, t));
  return out;
}

}  // namespace

DisentangledSpec DebertaConfig::attention() const {
  DisentangledSpec s;
  s.heads = num_heads;
  s.head_dim = head_dim();
  s.c2p = c2p;
  s.p2c = p2c;
  s.position_buckets = position_buckets;
  s.max_relative_positions = max_relative_positions;
  return s;
}

DebertaConfig DebertaConfig::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  DebertaConfig c;
  c.raw = j;
  auto size = [&](const char* key, int64_t fallback, int64_t lo = 1) {
    const int64_t v = io::get_optional_int(j, key, path).value_or(fallback);
    if (v < lo || v > kMaxSize)
      throw InputError(fmt::format("{}: key '{}' must be in [{}, {}], got {}", path, key, lo,
                                   kMaxSize, v));
    return v;
  };
  auto real = [&](const char* key, double fallback, bool probability) {
    return config_real(j, key, fallback, probability, path);
  };
  auto flag = [&](const char* key, bool fallback) {
    return io::get_optional_bool(j, key, path).value_or(fallback);
  };
  c.vocab_size = size("vocab_size", c.vocab_size);
  c.hidden_size = size("hidden_size", c.hidden_size);
  c.num_layers = size("num_hidden_layers", c.num_layers);
  c.num_heads = size("num_attention_heads", c.num_heads);
  c.intermediate_size = size("intermediate_size", c.intermediate_size);
  c.max_position_embeddings = size("max_position_embeddings", c.max_position_embeddings);
  c.type_vocab_size = size("type_vocab_size", 0, 0);
  c.pad_token_id = size("pad_token_id", 0, 0);
  if (c.num_layers > kMaxLayers)
    throw InputError(fmt::format("{}: num_hidden_layers {} is more than the {} ftune supports",
                                 path, c.num_layers, kMaxLayers));
  if (c.hidden_size % c.num_heads != 0)
    throw InputError(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}",
                                 path, c.hidden_size, c.num_heads));
  if (c.pad_token_id >= c.vocab_size)
    throw InputError(fmt::format("{}: pad_token_id {} outside the vocabulary of {}", path,
                                 c.pad_token_id, c.vocab_size));
  c.layer_norm_eps = real("layer_norm_eps", 1e-7, false);
  c.hidden_dropout = real("hidden_dropout_prob", 0.1, true);
  c.attention_dropout = real("attention_probs_dropout_prob", 0.1, true);
  c.pooler_dropout = real("pooler_dropout", 0.0, true);
  c.cls_dropout = real("cls_dropout", c.hidden_dropout, true);
  c.initializer_range = real("initializer_range", 0.02, false);
  c.activation = gelu_form_from_hf(io::get_optional_string(j, "hidden_act", path).value_or("gelu"),
                                   path + ": hidden_act");
  const std::string pooler_act =
      io::get_optional_string(j, "pooler_hidden_act", path).value_or("gelu");
  c.pooler_act = pooler_act == "tanh" ? PoolerAct::Tanh
                 : gelu_form_from_hf(pooler_act, path + ": pooler_hidden_act") == GeluForm::Erf
                     ? PoolerAct::Gelu
                     : PoolerAct::GeluTanh;
  c.position_biased_input = flag("position_biased_input", true);
  c.share_att_key = flag("share_att_key", false);
  for (const std::string& t : pos_att_types(j, path)) (t == "c2p" ? c.c2p : c.p2c) = true;
  std::string norm = io::get_optional_string(j, "norm_rel_ebd", path).value_or("none");
  std::transform(norm.begin(), norm.end(), norm.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  c.norm_rel_ebd = norm.find("layer_norm") != std::string::npos;
  c.position_buckets = io::get_optional_int(j, "position_buckets", path).value_or(-1);
  const int64_t max_rel = io::get_optional_int(j, "max_relative_positions", path).value_or(-1);
  c.max_relative_positions = max_rel < 1 ? c.max_position_embeddings : max_rel;
  if (c.position_buckets > kMaxSize || c.max_relative_positions > kMaxSize ||
      (c.position_buckets > 0 && (c.position_buckets < 2 || c.max_relative_positions < 2)))
    throw InputError(fmt::format("{}: position_buckets {} with max_relative_positions {}: "
                                 "expected buckets >= 2 and max_relative_positions >= 2",
                                 path, c.position_buckets, c.max_relative_positions));
  // Variants DebertaV2 has that ftune does not run (no published v2 / v3 checkpoint uses them).
  if (!flag("relative_attention", false))
    throw InputError(fmt::format("{}: relative_attention false is not supported (DeBERTa-v2/v3 "
                                 "checkpoints set it true)",
                                 path));
  if (io::get_optional_int(j, "embedding_size", path).value_or(c.hidden_size) != c.hidden_size)
    throw InputError(fmt::format("{}: embedding_size different from hidden_size (embed_proj) is "
                                 "not supported",
                                 path));
  if (io::get_optional_int(j, "conv_kernel_size", path).value_or(0) > 0)
    throw InputError(fmt::format("{}: conv_kernel_size > 0 (DeBERTa-v2's ConvLayer) is not "
                                 "supported",
                                 path));
  if (io::get_optional_int(j, "attention_head_size", path).value_or(c.head_dim()) != c.head_dim())
    throw InputError(fmt::format("{}: attention_head_size different from hidden_size / "
                                 "num_attention_heads is not supported",
                                 path));
  if (io::get_optional_int(j, "pooler_hidden_size", path).value_or(c.hidden_size) != c.hidden_size)
    throw InputError(fmt::format("{}: pooler_hidden_size different from hidden_size is not "
                                 "supported (HF's classifier reads hidden_size features)",
                                 path));
  c.id2label = config_labels(j, path);
  return c;
}

nlohmann::json DebertaConfig::to_json() const {
  return config_with_labels(raw, "deberta-v2", "DebertaV2ForSequenceClassification", id2label);
}

}  // namespace ftune
