// Padded host batches: real-token counts, row cuts and padding (see batch.h).
#include "data/batch.h"

#include <algorithm>

#include "core/error.h"

namespace ftune {

int64_t Batch::real_tokens() const {
  int64_t n = 0;
  for (int32_t m : attention_mask) n += m != 0;
  return n;
}

int64_t Batch::row_length(int64_t r) const {
  int64_t len = seq_len;
  while (len > 0 && attention_mask[r * seq_len + len - 1] == 0) --len;
  return len;
}

Batch slice_rows(const Batch& batch, int64_t row0, int64_t rows) {
  FTUNE_ASSERT(row0 >= 0 && rows >= 1 && row0 + rows <= batch.size,
               "rows [{}, {}) of a batch of {}", row0, row0 + rows, batch.size);
  const int64_t T = batch.seq_len;
  Batch out;
  out.size = rows;
  for (int64_t r = row0; r < row0 + rows; ++r) out.seq_len = std::max(out.seq_len, batch.row_length(r));
  out.seq_len = std::max<int64_t>(out.seq_len, 1);
  const int64_t S = out.seq_len;
  auto cut = [&](const std::vector<int32_t>& v) {
    std::vector<int32_t> o(rows * S);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(v.begin() + (row0 + r) * T, v.begin() + (row0 + r) * T + S, o.begin() + r * S);
    return o;
  };
  out.input_ids = cut(batch.input_ids);
  out.attention_mask = cut(batch.attention_mask);
  if (!batch.token_type_ids.empty()) out.token_type_ids = cut(batch.token_type_ids);
  if (!batch.token_labels.empty()) out.token_labels = cut(batch.token_labels);
  if (!batch.labels.empty())
    out.labels.assign(batch.labels.begin() + row0, batch.labels.begin() + row0 + rows);
  if (const int64_t w = batch.target_width(); w > 0)
    out.targets.assign(batch.targets.begin() + row0 * w, batch.targets.begin() + (row0 + rows) * w);
  return out;
}

int64_t padded_length(int64_t longest, int64_t multiple, int64_t cap) {
  return std::max(longest, std::min(cap, (longest + multiple - 1) / multiple * multiple));
}

void pad_to_length(Batch& batch, int64_t T, int32_t pad_id) {
  const int64_t B = batch.size, S = batch.seq_len;
  FTUNE_ASSERT(T >= S, "pad_to_length: {} positions is shorter than the batch's {}", T, S);
  if (T == S) return;
  auto widen = [&](std::vector<int32_t>& v, int32_t fill) {
    if (v.empty()) return;
    std::vector<int32_t> out(static_cast<size_t>(B * T), fill);
    for (int64_t r = 0; r < B; ++r)
      std::copy(v.begin() + r * S, v.begin() + (r + 1) * S, out.begin() + r * T);
    v = std::move(out);
  };
  widen(batch.input_ids, pad_id);
  widen(batch.token_type_ids, 0);
  widen(batch.attention_mask, 0);
  widen(batch.token_labels, -100);
  batch.seq_len = T;
}

}  // namespace ftune
