// A tokenized, right-padded batch on the host, as the data pipeline assembles it: B sequences of
// T tokens, with token types, the attention mask and optional labels. It is the step batch the
// trainer cuts into micro-batches and the batch evaluation and prediction run on; what a model
// reads is a TokenBatch (data/token_batch.h), padded or packed, laid out from its rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"  // its functions raise InputError / InternalError

namespace ftune {

struct Batch {
  int64_t size = 0;                     // B
  int64_t seq_len = 0;                  // T
  std::vector<int32_t> input_ids;       // (B*T)
  std::vector<int32_t> token_type_ids;  // (B*T); empty means all zeros
  std::vector<int32_t> attention_mask;  // (B*T) 1 = real token, 0 = padding
  std::vector<int32_t> labels;          // (B) or empty; -100 ignores a row
  std::vector<float> targets;           // (B * W) float targets of a score task, or empty
  // (B*T) a causal LM's labels, or empty: at each position the id of the token that follows it
  // (already shifted, as transformers' loss shifts them), -100 where no loss is counted (prompt
  // tokens, a row's last token, padding).
  std::vector<int32_t> token_labels;

  // Number of real (unpadded) tokens: what tokens/s reports count.
  int64_t real_tokens() const;
  // Real tokens of row r: right-padded, so up to its last unmasked position.
  int64_t row_length(int64_t r) const;
  // W: float targets per row (0 without them).
  int64_t target_width() const {
    return size > 0 ? static_cast<int64_t>(targets.size()) / size : 0;
  }
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

}  // namespace ftune
