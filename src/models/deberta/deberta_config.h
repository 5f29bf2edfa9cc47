// The configuration of a DeBERTa-v2 / v3 classifier (model_type "deberta-v2": DeBERTa-v2, v3 and
// mDeBERTa), read from a Hugging Face config.json with DebertaV2Config's defaults for absent keys.
// Only the DeBERTa family's code (models/deberta_*) reads it. The original JSON is kept so that
// saving writes back every field, with the classification ones updated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/disentangled_attention.h"
#include "ops/gelu.h"

namespace ftune {

// The pooler's activation (HF's pooler_hidden_act).
enum class PoolerAct : uint8_t { Gelu, GeluTanh, Tanh };

struct DebertaConfig {
  int64_t vocab_size = 128100;
  int64_t hidden_size = 1536;
  int64_t num_layers = 24;
  int64_t num_heads = 24;
  int64_t intermediate_size = 6144;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 0;  // 0: no token_type_embeddings
  int64_t pad_token_id = 0;
  float layer_norm_eps = 1e-7f;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float pooler_dropout = 0.0f;
  float cls_dropout = 0.1f;  // config's cls_dropout, or hidden_dropout_prob when absent / null
  float initializer_range = 0.02f;
  GeluForm activation = GeluForm::Erf;
  PoolerAct pooler_act = PoolerAct::Gelu;
  bool position_biased_input = true;  // absolute position embeddings added to the input
  bool norm_rel_ebd = false;          // norm_rel_ebd contains "layer_norm"
  bool share_att_key = false;
  bool c2p = false, p2c = false;      // pos_att_type
  int64_t position_buckets = -1;
  int64_t max_relative_positions = 0;  // resolved: max_position_embeddings when the config's < 1
  std::vector<std::string> id2label;
  nlohmann::json raw;

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
  int64_t head_dim() const { return hidden_size / num_heads; }
  DisentangledSpec attention() const;
  // Rows of rel_embeddings: 2S.
  int64_t rel_rows() const { return 2 * attention().span(); }

  // Parses config.json content; errors name `path` and the key (unsupported variants included:
  // relative_attention false, embedding_size != hidden_size, conv_kernel_size > 0).
  static DebertaConfig from_json(const nlohmann::json& j, const std::string& path);
  nlohmann::json to_json() const;
};

}  // namespace ftune
