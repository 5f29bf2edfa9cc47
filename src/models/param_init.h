// Fresh parameters as Hugging Face's _init_weights makes them for BERT-family models: Linear and
// Embedding weights ~ normal(0, initializer_range), biases 0, LayerNorm weight 1 and bias 0, the
// padding row of the word embeddings 0. Used for a head missing from a checkpoint and for
// randomly initialised models (benchmarks, tests). Values come from a seeded std::mt19937_64, so
// they are reproducible in ftune but not equal to torch's.
#pragma once

#include <cstdint>
#include <random>

#include "models/param_table.h"
#include "models/sequence_classifier.h"

namespace ftune {

// LayerNorm weights 1, biases 0, everything else normal(0, initializer_range) with row zero_row
// (an nn.Embedding's padding_idx; -1: none) 0. Each family picks its padded rows (BERT's:
// models/bert/bert_family.cc).
void init_param_like_hf(const ParamSpec& spec, TensorView dst, float initializer_range,
                        int64_t zero_row, std::mt19937_64& rng);
// Every parameter of the model by its family's rule (Backbone::init_param).
void init_all_params_like_hf(SequenceClassifier& model, uint64_t seed);

}  // namespace ftune
