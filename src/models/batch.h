// Model-side rules for host batches (data/batch.h, data/token_batch.h): position ids by the
// family's rule, and validation of a batch against a model.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "data/token_batch.h"
#include "models/backbone.h"

namespace ftune {

// Position ids of every row as HF computes them (Backbone::row_positions): BERT 0..T-1 for every
// row; RoBERTa / XLM-R pad_token_id + 1 + (index among non-pad tokens) for tokens that are not the
// pad id, and pad_token_id for pad tokens (create_position_ids_from_input_ids).
std::vector<int32_t> position_ids(const ModelSpec& model, const Batch& batch);

// Checks sizes and ranges against the model (token ids, type ids, positions within
// max_position_embeddings, mask values, labels); throws InputError saying which row and why.
void validate_batch(const ModelSpec& model, const Batch& batch);

}  // namespace ftune
