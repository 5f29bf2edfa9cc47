// Padded and packed layouts of a batch's rows, and the cut of a step into micro-batches (see
// token_batch.h).
#include "data/token_batch.h"

#include <algorithm>

#include "core/error.h"

namespace ftune {

const char* batch_layout_name(BatchLayout layout) {
  return layout == BatchLayout::Packed ? "packed" : "padded";
}

int64_t TokenBatch::real_tokens() const {
  if (packed()) return tokens();
  int64_t n = 0;
  for (int32_t m : attention_mask) n += m != 0;
  return n;
}

TokenBatch layout_rows(const Batch& batch, const std::vector<int32_t>& positions, int64_t row0,
                       int64_t rows, BatchLayout layout, int64_t pad_multiple) {
  FTUNE_ASSERT(row0 >= 0 && rows >= 1 && row0 + rows <= batch.size,
               "rows [{}, {}) of a batch of {}", row0, row0 + rows, batch.size);
  const int64_t T = batch.seq_len;
  FTUNE_ASSERT(static_cast<int64_t>(positions.size()) == batch.size * T,
               "{} position ids for a batch of {} x {}", positions.size(), batch.size, T);
  TokenBatch out;
  out.layout = layout;
  out.rows = rows;
  out.row0 = row0;
  int64_t longest = 1;
  for (int64_t r = row0; r < row0 + rows; ++r) longest = std::max(longest, batch.row_length(r));
  const bool packed = layout == BatchLayout::Packed;
  out.seq = packed ? longest : padded_length(longest, pad_multiple, T);
  out.cu_seqlens.push_back(0);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t src = (row0 + b) * T;
    const int64_t n = packed ? batch.row_length(row0 + b) : out.seq;
    for (int64_t t = 0; t < n; ++t) {
      out.input_ids.push_back(batch.input_ids[src + t]);
      out.token_type_ids.push_back(batch.token_type_ids.empty() ? 0
                                                                : batch.token_type_ids[src + t]);
      out.position_ids.push_back(positions[src + t]);
      out.row_ids.push_back(static_cast<int32_t>(b));
      if (!packed) out.attention_mask.push_back(batch.attention_mask[src + t]);
      if (!batch.token_labels.empty()) out.token_labels.push_back(batch.token_labels[src + t]);
    }
    out.cu_seqlens.push_back(static_cast<int32_t>(out.input_ids.size()));
    if (!batch.labels.empty()) out.labels.push_back(batch.labels[row0 + b]);
    const int64_t w = batch.target_width();
    for (int64_t c = 0; c < w; ++c) out.targets.push_back(batch.targets[(row0 + b) * w + c]);
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> micro_batch_cuts(const std::vector<int64_t>& lengths,
                                                          BatchLayout layout, int64_t max_rows,
                                                          int64_t max_tokens, int64_t begin,
                                                          int64_t end, int64_t group_size) {
  FTUNE_ASSERT(max_rows >= 1 && group_size >= 1, "micro-batches of {} rows, groups of {}",
               max_rows, group_size);
  const auto size = static_cast<int64_t>(lengths.size());
  if (end < 0) end = size;
  FTUNE_ASSERT(0 <= begin && begin <= end && end <= size, "rows [{}, {}) of a batch of {}", begin,
               end, size);
  std::vector<std::pair<int64_t, int64_t>> cuts;
  for (int64_t row0 = begin; row0 < end;) {
    int64_t rows = 0, tokens = 0;
    while (row0 + rows < end) {
      // The next unit: a row, or (group_size > 1) a whole group.
      const int64_t unit = std::min(group_size, end - row0 - rows);
      int64_t len = 0;
      for (int64_t r = 0; r < unit; ++r) len += lengths[row0 + rows + r];
      if (rows > 0 && rows + unit > max_rows) break;
      if (layout == BatchLayout::Packed && rows > 0 && tokens + len > max_tokens) break;
      tokens += len;
      rows += unit;
      if (rows >= max_rows) break;
    }
    cuts.push_back({row0, rows});
    row0 += rows;
  }
  return cuts;
}

std::vector<std::pair<int64_t, int64_t>> micro_batch_cuts(const Batch& step, BatchLayout layout,
                                                          int64_t max_rows, int64_t max_tokens,
                                                          int64_t begin, int64_t end,
                                                          int64_t group_size) {
  std::vector<int64_t> lengths(static_cast<size_t>(step.size));
  for (int64_t r = 0; r < step.size; ++r) lengths[r] = step.row_length(r);
  return micro_batch_cuts(lengths, layout, max_rows, max_tokens, begin, end, group_size);
}

int64_t computed_tokens(const Batch& step, int64_t row0, int64_t rows, BatchLayout layout,
                        int64_t pad_multiple) {
  int64_t real = 0, longest = 1;
  for (int64_t r = row0; r < row0 + rows; ++r) {
    const int64_t len = step.row_length(r);
    real += len;
    longest = std::max(longest, len);
  }
  if (layout == BatchLayout::Packed) return real;
  return rows * padded_length(longest, pad_multiple, step.seq_len);
}

}  // namespace ftune
