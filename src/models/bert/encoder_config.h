// The configuration of a BERT-family encoder classifier, read from a Hugging Face config.json. Only
// the BERT family's code (models/) reads it; everything else holds the ModelSpec it converts to.
// The original JSON is kept so that saving writes back every field the user's checkpoint had
// (transformers then loads ftune's output as it loaded the input), with the classification
// fields (architectures, id2label, label2id, problem_type) updated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/backbone.h"
#include "ops/gelu.h"

namespace ftune {

// The BERT family's variants, by config.json's model_type: bert, roberta, xlm-roberta. Bert has
// the pooler and BERT's heads; the others are RoBERTa-like (padding offset positions, the
// classifier.dense / out_proj head). A model_type that differs from one of them only in its name
// and architecture is a row of the variants' table (encoder_config.cc), nothing else.
enum class BertVariant : uint8_t { Bert, Roberta, XlmRoberta };

// Every model_type the BERT family reads, in its table's order (the registry registers each).
const std::vector<std::string>& bert_model_types();

struct EncoderConfig {
  BertVariant variant = BertVariant::Bert;
  // config.json's model_type when it is not the variant's own name (a row of the variants' table
  // sharing the variant); empty: the variant's name.
  std::string hf_model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t type_vocab_size = 0;
  int64_t pad_token_id = 0;
  float layer_norm_eps = 1e-12f;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float classifier_dropout = 0.1f;  // config's classifier_dropout, or hidden_dropout when null
  float initializer_range = 0.02f;
  GeluForm activation = GeluForm::Erf;
  std::vector<std::string> id2label;  // its size is num_labels
  nlohmann::json raw;                 // config.json as read

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
  int64_t head_dim() const { return hidden_size / num_heads; }
  bool roberta_like() const { return variant != BertVariant::Bert; }
  // "bert" or "roberta": the prefix of encoder weights in HF's *ForSequenceClassification.
  std::string weight_prefix() const;
  std::string model_type() const;    // "bert", "roberta", "xlm-roberta"
  std::string architecture() const;  // "BertForSequenceClassification", ...

  // Parses config.json content; `path` names the file in errors (unknown model_type, missing or
  // mistyped keys, inconsistent sizes).
  static EncoderConfig from_json(const nlohmann::json& j, const std::string& path);
  static EncoderConfig from_file(const std::string& path);
  // Replaces the labels (num_labels changes with them); names default to LABEL_i.
  void set_labels(std::vector<std::string> labels);
  void set_num_labels(int64_t n);
  // config.json content for saving: the original fields with model_type, architectures, id2label
  // and label2id updated.
  nlohmann::json to_json() const;
  // The BERT family's backbone over this config (models/bert/bert_family.h): what generic code
  // takes.
  operator ModelSpec() const;  // NOLINT(google-explicit-constructor)
};

}  // namespace ftune
