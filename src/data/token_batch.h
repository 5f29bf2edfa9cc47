// The token-centric batch a model reads: N tokens with their ids, token types and position ids,
// the row each token belongs to, row starts (cu_seqlens) and a label per row. Two layouts of the
// same rows:
//   padded  B rows of T positions each (N = B * T), right-padded, with an attention mask; row b's
//           slots are [b * T, (b + 1) * T), cu[b] = b * T
//   packed  the rows' real tokens back to back (N = their sum), no padding and no mask; row b is
//           tokens [cu[b], cu[b + 1])
// Position ids are the row's own (as if it were alone), so a row computes the same in either
// layout; dropout masks are keyed by the row's place in the step batch (row0 + b) and the token's
// position in its row (ops/dropout.h), so the trajectory does not depend on the layout or on how
// a step is cut into micro-batches.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/batch.h"

namespace ftune {

enum class BatchLayout : uint8_t { Padded, Packed };
const char* batch_layout_name(BatchLayout layout);  // "padded", "packed"

struct TokenBatch {
  BatchLayout layout = BatchLayout::Padded;
  int64_t rows = 0;  // B
  int64_t seq = 0;   // padded: T, positions per row; packed: the longest row
  int64_t row0 = 0;  // the first row's place in the step batch (dropout streams)
  std::vector<int32_t> input_ids, token_type_ids, position_ids;  // (N)
  std::vector<int32_t> row_ids;                                   // (N): b of each token
  std::vector<int32_t> attention_mask;                            // padded: (N); packed: empty
  std::vector<int32_t> cu_seqlens;                                // (B + 1)
  std::vector<int32_t> labels;                                    // (B) or empty
  std::vector<int32_t> token_labels;  // (N) a causal LM's next-token labels (Batch's), or empty
  std::vector<float> targets;                                     // (B * W) or empty

  int64_t tokens() const { return static_cast<int64_t>(input_ids.size()); }
  int64_t real_tokens() const;
  bool packed() const { return layout == BatchLayout::Packed; }
};

// Rows [row0, row0 + rows) of a right-padded batch laid out as `layout`, with their position ids
// cut from `positions` (the batch's, B * T; row-local, so the same as the cut rows' own). Padded:
// to the rows' longest, rounded up to a multiple of pad_multiple but not past the batch's T.
// Missing token types are zeros; labels and targets are copied when the batch has them.
TokenBatch layout_rows(const Batch& batch, const std::vector<int32_t>& positions, int64_t row0,
                       int64_t rows, BatchLayout layout, int64_t pad_multiple = 1);

// The micro-batches a step batch (rows ordered by length) is cut into: contiguous row ranges
// (row0, rows), each at most max_rows rows and, packed, at most max_tokens real tokens (a row
// longer than max_tokens goes alone). Padded cuts are every max_rows rows. Only rows [begin, end)
// are cut (end -1: the batch's last): a data-parallel rank's share of the step batch.
// group_size > 1 (listwise training: consecutive groups of that many rows from `begin`): cuts
// fall between groups only, each holding whole groups up to max_rows rows and, packed,
// max_tokens tokens (a group over either goes alone).
std::vector<std::pair<int64_t, int64_t>> micro_batch_cuts(const Batch& step, BatchLayout layout,
                                                          int64_t max_rows, int64_t max_tokens,
                                                          int64_t begin = 0, int64_t end = -1,
                                                          int64_t group_size = 1);
// The same cut from the rows' real lengths alone (what the memory plan walks before any batch
// is built: train/run_micro_batches.h).
std::vector<std::pair<int64_t, int64_t>> micro_batch_cuts(const std::vector<int64_t>& lengths,
                                                          BatchLayout layout, int64_t max_rows,
                                                          int64_t max_tokens, int64_t begin = 0,
                                                          int64_t end = -1,
                                                          int64_t group_size = 1);

// Tokens a cut computes: packed, its real tokens; padded, rows x its padded length.
int64_t computed_tokens(const Batch& step, int64_t row0, int64_t rows, BatchLayout layout,
                        int64_t pad_multiple = 1);

}  // namespace ftune
