// Model shapes the benchmarks share: all-MiniLM-L6-v2-sized and BERT-base-sized BERT configs
// (random weights; 30,522-token vocabulary, 512 positions, 2 labels), DeBERTa-v3-base's config
// (128,100-token vocabulary, 256 position buckets, shared position projections) and
// DeBERTa-v3-large's (24 layers of 1024), ModernBERT-base's (22 layers, every third global, local
// window 128), and a ~100M-parameter Llama (hidden 768, 12 layers, 12 query and 4 key / value
// heads, SwiGLU 2048, 32,000-token vocabulary; bench/torch_decoder_step.py builds the same
// LlamaConfig).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "models/backbone.h"

namespace ftune::bench {

inline ModelSpec bench_model_config(const std::string& model) {
  const bool large = model == "deberta-v3-large";
  if (model == "deberta-v3-base" || large)
    return model_spec_from_json(
        {{"model_type", "deberta-v2"}, {"vocab_size", 128100}, {"hidden_size", large ? 1024 : 768},
         {"num_hidden_layers", large ? 24 : 12}, {"num_attention_heads", large ? 16 : 12},
         {"intermediate_size", large ? 4096 : 3072}, {"max_position_embeddings", 512}, {"type_vocab_size", 0}, {"relative_attention", true},
         {"position_buckets", 256}, {"max_relative_positions", -1}, {"pos_att_type", "p2c|c2p"},
         {"share_att_key", true}, {"norm_rel_ebd", "layer_norm"},
         {"position_biased_input", false}, {"layer_norm_eps", 1e-7}, {"hidden_act", "gelu"},
         {"pooler_hidden_act", "gelu"}, {"num_labels", 2}},
        "<" + model + " benchmark config>");
  if (model == "llama-100m")
    return model_spec_from_json(
        {{"model_type", "llama"}, {"vocab_size", 32000}, {"hidden_size", 768},
         {"num_hidden_layers", 12}, {"num_attention_heads", 12}, {"num_key_value_heads", 4},
         {"intermediate_size", 2048}, {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-5},
         {"hidden_act", "silu"}, {"rope_theta", 10000.0}, {"pad_token_id", 0}, {"num_labels", 2}},
        "<llama-100m benchmark config>");
  if (model == "modernbert-base")  // answerdotai/ModernBERT-base's config.json, mean pooling
    return model_spec_from_json(
        {{"model_type", "modernbert"}, {"vocab_size", 50368}, {"hidden_size", 768},
         {"num_hidden_layers", 22}, {"num_attention_heads", 12}, {"intermediate_size", 1152},
         {"max_position_embeddings", 8192}, {"global_attn_every_n_layers", 3},
         {"local_attention", 128}, {"global_rope_theta", 160000.0}, {"local_rope_theta", 10000.0},
         {"norm_eps", 1e-5}, {"pad_token_id", 50283}, {"hidden_activation", "gelu"},
         {"classifier_pooling", "mean"}, {"mlp_dropout", 0.1}, {"attention_dropout", 0.1},
         {"classifier_dropout", 0.1}, {"num_labels", 2}},
        "<modernbert-base benchmark config>");
  nlohmann::json j = {{"model_type", "bert"},           {"vocab_size", 30522},
                      {"max_position_embeddings", 512}, {"type_vocab_size", 2},
                      {"hidden_act", "gelu"},           {"num_labels", 2}};
  if (model == "minilm")
    j.update({{"hidden_size", 384},
              {"num_hidden_layers", 6},
              {"num_attention_heads", 12},
              {"intermediate_size", 1536}});
  else if (model == "bert-base")
    j.update({{"hidden_size", 768},
              {"num_hidden_layers", 12},
              {"num_attention_heads", 12},
              {"intermediate_size", 3072}});
  else
    throw InputError(
        "--model must be minilm, bert-base, deberta-v3-base, deberta-v3-large, modernbert-base or "
        "llama-100m, got '" +
                     model + "'");
  return model_spec_from_json(j, "<" + model + " benchmark config>");
}

}  // namespace ftune::bench
