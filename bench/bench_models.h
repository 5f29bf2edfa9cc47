// Model shapes the benchmarks share: all-MiniLM-L6-v2-sized and BERT-base-sized BERT configs
// (random weights; 30,522-token vocabulary, 512 positions, 2 labels).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "models/backbone.h"

namespace ftune::bench {

inline ModelSpec bench_model_config(const std::string& model) {
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
    throw InputError("--model must be minilm or bert-base, got '" + model + "'");
  return model_spec_from_json(j, "<" + model + " benchmark config>");
}

}  // namespace ftune::bench
