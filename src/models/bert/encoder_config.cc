// config.json parsing for BERT, RoBERTa and XLM-RoBERTa; every error names the file and key.
#include "models/bert/encoder_config.h"

#include <fmt/format.h>


#include "core/choice.h"
#include "core/error.h"
#include "io/json_file.h"
#include "models/config_fields.h"

namespace ftune {

namespace {

// The family's model_types: the variant each is, and the architecture a saved config names.
struct VariantRow {
  const char* model_type;
  BertVariant variant;
  const char* architecture;
};
constexpr VariantRow kVariants[] = {
    {"bert", BertVariant::Bert, "BertForSequenceClassification"},
    {"roberta", BertVariant::Roberta, "RobertaForSequenceClassification"},
    {"xlm-roberta", BertVariant::XlmRoberta, "XLMRobertaForSequenceClassification"},
};

const VariantRow* find_row(const std::string& model_type) {
  for (const VariantRow& r : kVariants)
    if (model_type == r.model_type) return &r;
  return nullptr;
}

}  // namespace

const std::vector<std::string>& bert_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const VariantRow& r : kVariants) t.push_back(r.model_type);
    return t;
  }();
  return types;
}

std::string EncoderConfig::weight_prefix() const {
  return variant == BertVariant::Bert ? "bert" : "roberta";
}

std::string EncoderConfig::model_type() const {
  if (!hf_model_type.empty()) return hf_model_type;
  for (const VariantRow& r : kVariants)
    if (r.variant == variant) return r.model_type;
  return "?";
}

std::string EncoderConfig::architecture() const {
  const VariantRow* row = find_row(model_type());
  return row ? row->architecture : "?";
}

EncoderConfig EncoderConfig::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  EncoderConfig c;
  c.raw = j;
  const std::string type = io::get_string(j, "model_type", path);
  const VariantRow* row = find_row(type);
  if (!row)
    throw InputError(fmt::format(
        "{}: model_type '{}' is not supported; expected {} (BERT, MiniLM, RoBERTa, XLM-R, BGE "
        "rerankers)",
        path, type, either(bert_model_types())));
  c.variant = row->variant;
  if (type != c.model_type()) c.hf_model_type = type;  // a row after its variant's first
  auto size = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) {
    return config_size(j, key, path, fallback);
  };
  c.vocab_size = size("vocab_size");
  c.hidden_size = size("hidden_size");
  c.num_layers = size("num_hidden_layers");
  c.num_heads = size("num_attention_heads");
  c.intermediate_size = size("intermediate_size");
  c.max_position_embeddings = size("max_position_embeddings");
  c.type_vocab_size = size("type_vocab_size", 2);
  if (c.num_layers > kConfigMaxLayers)
    throw InputError(fmt::format("{}: num_hidden_layers {} is more than the {} ftune supports",
                                 path, c.num_layers, kConfigMaxLayers));
  c.pad_token_id = io::get_optional_int(j, "pad_token_id", path).value_or(c.roberta_like() ? 1 : 0);
  if (c.hidden_size % c.num_heads != 0)
    throw InputError(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}",
                                 path, c.hidden_size, c.num_heads));
  auto real = [&](const char* key, double fallback, bool probability) {
    return config_real(j, key, fallback, probability, path);
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

  c.id2label = config_labels(j, path);

  // A bound on the parameter count (a double: the products cannot overflow it), so that a corrupt
  // config is refused here rather than by an allocation of terabytes.
  const double C = c.hidden_size, F = c.intermediate_size, K = c.num_labels();
  const double params =
      (double(c.vocab_size) + c.max_position_embeddings + c.type_vocab_size + 2) * C +
      c.num_layers * (4 * C * C + 2 * C * F + 9 * C + F) + (C + 1) * C + (C + 1) * K;
  check_param_count(params, path,
                    fmt::format("vocab_size {}, hidden_size {}, num_hidden_layers {}, "
                                "intermediate_size {}",
                                c.vocab_size, c.hidden_size, c.num_layers, c.intermediate_size));
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
  id2label = numbered_labels(n);
}

nlohmann::json EncoderConfig::to_json() const {
  return config_with_labels(raw, model_type(), architecture(), id2label);
}

}  // namespace ftune
