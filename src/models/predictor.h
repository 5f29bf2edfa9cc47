// Batched inference: logits for many tokenized rows with a model loaded from a HF directory.
// Rows are sorted by length and cut into batches padded to their own longest row (dynamic
// padding, data/batcher.h), then the logits are returned in input order. The arena is planned for
// the longest row actually present, not for max_position_embeddings.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "data/examples.h"
#include "models/backbone.h"

namespace ftune {

struct Predictions {
  ModelInfo config;                        // of the loaded model (labels for the output)
  std::vector<std::vector<float>> logits;  // one row of num_labels per input, in input order
};

// Rows need input_ids; empty token_type_ids mean all zeros; labels are ignored.
Predictions predict_logits(const std::string& model_dir,
                           const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                           Device device);

}  // namespace ftune
