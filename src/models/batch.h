// A tokenized, padded batch on the host, as the data pipeline hands it to a model: B sequences of
// T tokens (right-padded), with token types, the attention mask and optional labels.
#pragma once

#include <cstdint>
#include <vector>

#include "models/encoder_config.h"

namespace ftune {

struct Batch {
  int64_t size = 0;                     // B
  int64_t seq_len = 0;                  // T
  std::vector<int32_t> input_ids;       // (B*T)
  std::vector<int32_t> token_type_ids;  // (B*T); empty means all zeros
  std::vector<int32_t> attention_mask;  // (B*T) 1 = real token, 0 = padding
  std::vector<int32_t> labels;          // (B) or empty; -100 ignores a row

  // Number of real (unpadded) tokens: what tokens/s reports count.
  int64_t real_tokens() const;
};

// Rows [row0, row0 + rows) of a right-padded batch, padded only to their own longest (the same
// batch as padding those examples directly): how the trainer cuts micro-batches from the batch of
// an optimizer step.
Batch slice_rows(const Batch& batch, int64_t row0, int64_t rows);

// Extends a right-padded batch to T >= batch.seq_len positions with padding (pad_id, type 0,
// mask 0): what padding to a multiple of some length does (train/step_graphs.h).
void pad_to_length(Batch& batch, int64_t T, int32_t pad_id);
// The length `longest` tokens are padded to: rounded up to a multiple of `multiple`, but not past
// `cap` (and never below `longest`).
int64_t padded_length(int64_t longest, int64_t multiple, int64_t cap);

// Position ids exactly as HF computes them: BERT 0..T-1 for every row; RoBERTa / XLM-R
// pad_token_id + 1 + (index among non-pad tokens) for tokens that are not the pad id, and
// pad_token_id for pad tokens (create_position_ids_from_input_ids).
std::vector<int32_t> position_ids(const EncoderConfig& config, const Batch& batch);

// Checks sizes and ranges against the model (token ids, type ids, positions within
// max_position_embeddings, mask values, labels); throws InputError saying which row and why.
void validate_batch(const EncoderConfig& config, const Batch& batch);

}  // namespace ftune
