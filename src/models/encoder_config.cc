// config.json parsing for BERT, RoBERTa and XLM-RoBERTa; every error names the file and key.
#include "models/encoder_config.h"

#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"

namespace ftune {

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
  auto positive = [&](const char* key) {
    const int64_t v = io::get_int(j, key, path);
    if (v <= 0)
      throw InputError(fmt::format("{}: key '{}' must be positive, got {}", path, key, v));
    return v;
  };
  c.vocab_size = positive("vocab_size");
  c.hidden_size = positive("hidden_size");
  c.num_layers = positive("num_hidden_layers");
  c.num_heads = positive("num_attention_heads");
  c.intermediate_size = positive("intermediate_size");
  c.max_position_embeddings = positive("max_position_embeddings");
  c.type_vocab_size = io::get_optional_int(j, "type_vocab_size", path).value_or(2);
  if (c.type_vocab_size <= 0)
    throw InputError(fmt::format("{}: key 'type_vocab_size' must be positive", path));
  c.pad_token_id = io::get_optional_int(j, "pad_token_id", path).value_or(c.roberta_like() ? 1 : 0);
  if (c.hidden_size % c.num_heads != 0)
    throw InputError(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}",
                                 path, c.hidden_size, c.num_heads));
  c.layer_norm_eps =
      static_cast<float>(io::get_optional_float(j, "layer_norm_eps", path).value_or(1e-12));
  c.hidden_dropout =
      static_cast<float>(io::get_optional_float(j, "hidden_dropout_prob", path).value_or(0.1));
  c.attention_dropout = static_cast<float>(
      io::get_optional_float(j, "attention_probs_dropout_prob", path).value_or(0.1));
  c.classifier_dropout = static_cast<float>(
      io::get_optional_float(j, "classifier_dropout", path).value_or(c.hidden_dropout));
  for (auto [key, v] : {std::pair{"hidden_dropout_prob", c.hidden_dropout},
                        std::pair{"attention_probs_dropout_prob", c.attention_dropout},
                        std::pair{"classifier_dropout", c.classifier_dropout}})
    if (!(v >= 0.0f && v < 1.0f))
      throw InputError(fmt::format("{}: key '{}' must be in [0, 1), got {}", path, key, v));
  c.initializer_range =
      static_cast<float>(io::get_optional_float(j, "initializer_range", path).value_or(0.02));
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
  if (j.contains("id2label") && j["id2label"].is_object() && !j["id2label"].empty()) {
    // Keys "0".."K-1", each once (transformers reads them with int(key)); names as written.
    const auto& m = j["id2label"];
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
    c.set_num_labels(io::get_optional_int(j, "num_labels", path).value_or(2));
  }
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
