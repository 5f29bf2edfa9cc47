// config.json parsing for BERT, RoBERTa and XLM-RoBERTa; every error names the file and key.
#include "models/encoder_config.h"

#include <fmt/format.h>

#include <cfloat>
#include <charconv>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {
namespace {

// Limits that no real checkpoint reaches: sizes are 32-bit (ids are int32), the deepest published
// transformers have ~200 layers, and 2^40 parameters is 4 TiB in f32.
constexpr int64_t kMaxSize = INT32_MAX;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxLabels = int64_t{1} << 20;
constexpr double kMaxParams = 1099511627776.0;  // 2^40

}  // namespace

std::string EncoderConfig::weight_prefix() const {
  return family == ModelFamily::Bert ? "bert" : "roberta";
}

std::string EncoderConfig::model_type() const {
  switch (family) {
    case ModelFamily::Bert:
      return "bert";
    case ModelFamily::Roberta:
      return "roberta";
    case ModelFamily::XlmRoberta:
      return "xlm-roberta";
  }
  return "?";
}

std::string EncoderConfig::architecture() const {
  switch (family) {
    case ModelFamily::Bert:
      return "BertForSequenceClassification";
    case ModelFamily::Roberta:
      return "RobertaForSequenceClassification";
    case ModelFamily::XlmRoberta:
      return "XLMRobertaForSequenceClassification";
  }
  return "?";
}

EncoderConfig EncoderConfig::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  EncoderConfig c;
  c.raw = j;
  const std::string type = io::get_string(j, "model_type", path);
  if (type == "bert")
    c.family = ModelFamily::Bert;
  else if (type == "roberta")
    c.family = ModelFamily::Roberta;
  else if (type == "xlm-roberta")
    c.family = ModelFamily::XlmRoberta;
  else
    throw InputError(
        fmt::format("{}: model_type '{}' is not supported; expected bert, roberta or "
                    "xlm-roberta (BERT, MiniLM, RoBERTa, XLM-R, BGE rerankers)",
                    path, type));
  // Sizes are 32-bit in ftune (token, position and type ids are int32): larger values can only
  // come from a corrupt or hostile file, and would overflow the sizes computed from them.
  auto size = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) {
    const int64_t v = fallback ? io::get_optional_int(j, key, path).value_or(*fallback)
                               : io::get_int(j, key, path);
    if (v <= 0 || v > kMaxSize)
      throw InputError(
          fmt::format("{}: key '{}' must be in [1, {}], got {}", path, key, kMaxSize, v));
    return v;
  };
  c.vocab_size = size("vocab_size");
  c.hidden_size = size("hidden_size");
  c.num_layers = size("num_hidden_layers");
  c.num_heads = size("num_attention_heads");
  c.intermediate_size = size("intermediate_size");
  c.max_position_embeddings = size("max_position_embeddings");
  c.type_vocab_size = size("type_vocab_size", 2);
  if (c.num_layers > kMaxLayers)
    throw InputError(fmt::format("{}: num_hidden_layers {} is more than the {} ftune supports",
                                 path, c.num_layers, kMaxLayers));
  c.pad_token_id = io::get_optional_int(j, "pad_token_id", path).value_or(c.roberta_like() ? 1 : 0);
  if (c.hidden_size % c.num_heads != 0)
    throw InputError(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}",
                                 path, c.hidden_size, c.num_heads));
  // Floats are read as doubles and must fit a float (casting 1e300 is undefined behaviour).
  auto real = [&](const char* key, double fallback, bool probability) {
    const double v = io::get_optional_float(j, key, path).value_or(fallback);
    // (A probability just below 1 would round to 1.0f: compared as the float it becomes.)
    const bool ok =
        probability ? v >= 0 && v < 1 && static_cast<float>(v) < 1.0f : v >= 0 && v <= FLT_MAX;
    if (!ok)
      throw InputError(fmt::format("{}: key '{}' must be {}, got {}", path, key,
                                   probability ? "in [0, 1)" : "a finite number >= 0", v));
    return static_cast<float>(v);
  };
  c.layer_norm_eps = real("layer_norm_eps", 1e-12, false);
  c.hidden_dropout = real("hidden_dropout_prob", 0.1, true);
  c.attention_dropout = real("attention_probs_dropout_prob", 0.1, true);
  c.classifier_dropout = real("classifier_dropout", c.hidden_dropout, true);
  c.initializer_range = real("initializer_range", 0.02, false);
  c.activation = gelu_form_from_hf(io::get_optional_string(j, "hidden_act", path).value_or("gelu"),
                                   path + ": hidden_act");
  const std::string pos_type =
      io::get_optional_string(j, "position_embedding_type", path).value_or("absolute");
  if (pos_type != "absolute")
    throw InputError(fmt::format(
        "{}: position_embedding_type '{}' is not supported (only 'absolute')", path, pos_type));
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size)
    throw InputError(fmt::format("{}: pad_token_id {} outside the vocabulary of {}", path,
                                 c.pad_token_id, c.vocab_size));

  // Labels: id2label ({"0": "neg", "1": "pos"}) as transformers writes it, else num_labels, else 2.
  // The keys must be exactly the ids 0..n-1 ("01" next to "1" would leave a label unnamed).
  if (j.contains("id2label") && j["id2label"].is_object() && !j["id2label"].empty()) {
    // Keys "0".."K-1", each once (transformers reads them with int(key)); names as written.
    const auto& m = j["id2label"];
    if (m.size() > static_cast<size_t>(kMaxLabels))
      throw InputError(fmt::format("{}: id2label has {} labels, more than the {} ftune supports",
                                   path, m.size(), kMaxLabels));
    c.id2label.assign(m.size(), {});
    std::vector<bool> seen(m.size(), false);
    for (auto it = m.begin(); it != m.end(); ++it) {
      size_t idx = m.size();
      const std::string& key = it.key();
      const auto parsed = std::from_chars(key.data(), key.data() + key.size(), idx);
      if (parsed.ec != std::errc() || parsed.ptr != key.data() + key.size() ||
          std::to_string(idx) != key)
        idx = m.size();
      if (idx >= m.size() || seen[idx] || !it.value().is_string())
        throw InputError(fmt::format(
            "{}: id2label must map each id 0..{} to a label name; bad entry '{}'", path,
            m.size() - 1, it.key()));
      seen[idx] = true;
      c.id2label[idx] = it.value().get<std::string>();
    }
  } else {
    const int64_t n = io::get_optional_int(j, "num_labels", path).value_or(2);
    if (n <= 0 || n > kMaxLabels)
      throw InputError(
          fmt::format("{}: key 'num_labels' must be in [1, {}], got {}", path, kMaxLabels, n));
    c.set_num_labels(n);
  }

  // A bound on the parameter count (a double: the products cannot overflow it), so that a corrupt
  // config is refused here rather than by an allocation of terabytes.
  const double C = c.hidden_size, F = c.intermediate_size, K = c.num_labels();
  const double params =
      (double(c.vocab_size) + c.max_position_embeddings + c.type_vocab_size + 2) * C +
      c.num_layers * (4 * C * C + 2 * C * F + 9 * C + F) + (C + 1) * C + (C + 1) * K;
  if (params > kMaxParams)
    throw InputError(fmt::format(
        "{}: the sizes describe a model of {:.3g} parameters, more than the {:.3g} ftune supports "
        "(vocab_size {}, hidden_size {}, num_hidden_layers {}, intermediate_size {})",
        path, params, kMaxParams, c.vocab_size, c.hidden_size, c.num_layers, c.intermediate_size));
  return c;
}

EncoderConfig EncoderConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path), path);
}

void EncoderConfig::set_labels(std::vector<std::string> labels) {
  if (labels.empty()) throw InputError("a classifier needs at least one label");
  id2label = std::move(labels);
}

void EncoderConfig::set_num_labels(int64_t n) {
  if (n <= 0) throw InputError(fmt::format("num_labels must be positive, got {}", n));
  std::vector<std::string> names;
  for (int64_t i = 0; i < n; ++i) names.push_back(fmt::format("LABEL_{}", i));
  id2label = std::move(names);
}

nlohmann::json EncoderConfig::to_json() const {
  nlohmann::json j = raw.is_object() ? raw : nlohmann::json::object();
  j["model_type"] = model_type();
  j["architectures"] = nlohmann::json::array({architecture()});
  nlohmann::json id2 = nlohmann::json::object(), label2 = nlohmann::json::object();
  for (size_t i = 0; i < id2label.size(); ++i) {
    id2[std::to_string(i)] = id2label[i];
    label2[id2label[i]] = i;
  }
  j["id2label"] = id2;
  j["label2id"] = label2;
  j.erase("num_labels");
  return j;
}

}  // namespace ftune
