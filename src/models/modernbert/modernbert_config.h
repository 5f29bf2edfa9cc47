// The configuration of a ModernBERT classifier (HF's ModernBertForSequenceClassification), read
// from config.json. Both spellings of the published files are read: transformers 5's
// `layer_types` + `rope_parameters` (one RoPE setting per layer type), and the original
// checkpoints' `global_attn_every_n_layers` + `global_rope_theta` / `local_rope_theta` (layer l is
// global when l % n == 0). The original JSON is kept so that saving writes back every field
// (models/config_fields.h), with the classification fields updated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/rope_config.h"
#include "ops/gelu.h"
#include "ops/glu.h"

namespace ftune {

enum class ModernBertPooling { Cls, Mean };

struct ModernBertConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, intermediate_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t head_dim = 0;           // hidden_size / num_attention_heads
  float norm_eps = 1e-5f;
  bool norm_bias = false;         // every LayerNorm's bias
  bool attention_bias = false;    // Wqkv and attn.Wo biases
  bool mlp_bias = false;          // Wi and mlp.Wo biases
  bool classifier_bias = false;   // head.dense's bias (the classifier itself always has one)
  GluAct activation = GluAct::GeluErf;       // hidden_activation of the GeGLU MLP
  GeluForm classifier_activation = GeluForm::Erf;
  ModernBertPooling pooling = ModernBertPooling::Cls;
  int64_t local_attention = 128;  // sliding layers see |i - j| <= local_attention / 2
  std::vector<bool> global;       // per layer: full attention (else the local window)
  RopeConfig global_rope, local_rope;
  int64_t pad_token_id = -1;      // nn.Embedding's padding_idx: that row gets no gradient
  float embedding_dropout = 0, attention_dropout = 0, mlp_dropout = 0, classifier_dropout = 0;
  float initializer_range = 0.02f;
  float initializer_cutoff_factor = 2.0f;
  std::vector<std::string> id2label;
  nlohmann::json raw;

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
  const RopeConfig& rope(int64_t layer) const { return global[layer] ? global_rope : local_rope; }

  // Parses config.json content (model_type "modernbert"); `path` names the file in errors.
  static ModernBertConfig from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
};

}  // namespace ftune
