// Batch validation and HF position ids.
#include "models/batch.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "models/input_limits.h"

namespace ftune {

int64_t Batch::real_tokens() const {
  int64_t n = 0;
  for (int32_t m : attention_mask) n += m != 0;
  return n;
}

Batch slice_rows(const Batch& batch, int64_t row0, int64_t rows) {
  FTUNE_ASSERT(row0 >= 0 && rows >= 1 && row0 + rows <= batch.size,
               "rows [{}, {}) of a batch of {}", row0, row0 + rows, batch.size);
  const int64_t T = batch.seq_len;
  Batch out;
  out.size = rows;
  for (int64_t r = row0; r < row0 + rows; ++r) {
    int64_t len = T;  // right-padded: the real tokens end at the last unmasked position
    while (len > 0 && batch.attention_mask[r * T + len - 1] == 0) --len;
    out.seq_len = std::max(out.seq_len, len);
  }
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
  if (!batch.labels.empty())
    out.labels.assign(batch.labels.begin() + row0, batch.labels.begin() + row0 + rows);
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
  batch.seq_len = T;
}

std::vector<int32_t> position_ids(const EncoderConfig& c, const Batch& b) {
  std::vector<int32_t> pos(b.size * b.seq_len);
  for (int64_t r = 0; r < b.size; ++r) {
    int32_t count = 0;
    for (int64_t t = 0; t < b.seq_len; ++t) {
      const int64_t i = r * b.seq_len + t;
      if (!c.roberta_like()) {
        pos[i] = static_cast<int32_t>(t);
      } else if (b.input_ids[i] != c.pad_token_id) {
        pos[i] = static_cast<int32_t>(c.pad_token_id + 1 + count++);
      } else {
        pos[i] = static_cast<int32_t>(c.pad_token_id);
      }
    }
  }
  return pos;
}

void validate_batch(const EncoderConfig& c, const Batch& b) {
  const int64_t n = b.size * b.seq_len;
  if (b.size <= 0 || b.seq_len <= 0)
    throw InputError(fmt::format("empty batch ({} x {})", b.size, b.seq_len));
  if (static_cast<int64_t>(b.input_ids.size()) != n ||
      static_cast<int64_t>(b.attention_mask.size()) != n ||
      (!b.token_type_ids.empty() && static_cast<int64_t>(b.token_type_ids.size()) != n))
    throw InputError(fmt::format("batch of {} x {} tokens has {} ids, {} mask values, {} type ids",
                                 b.size, b.seq_len, b.input_ids.size(), b.attention_mask.size(),
                                 b.token_type_ids.size()));
  if (!b.labels.empty() && static_cast<int64_t>(b.labels.size()) != b.size)
    throw InputError(fmt::format("batch of {} rows has {} labels", b.size, b.labels.size()));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / b.seq_len, col = i % b.seq_len;
    if (b.input_ids[i] < 0 || b.input_ids[i] >= c.vocab_size)
      throw InputError(
          fmt::format("row {}: token id {} at position {} is outside the vocabulary of {}", row,
                      b.input_ids[i], col, c.vocab_size));
    if (!b.token_type_ids.empty() &&
        (b.token_type_ids[i] < 0 || b.token_type_ids[i] >= c.type_vocab_size))
      throw InputError(
          fmt::format("row {}: token type {} at position {} is outside [0, {}) (type_vocab_size)",
                      row, b.token_type_ids[i], col, c.type_vocab_size));
    if (b.attention_mask[i] != 0 && b.attention_mask[i] != 1)
      throw InputError(
          fmt::format("row {}: attention mask value {} at position {} (expected 0 or 1)", row,
                      b.attention_mask[i], col));
  }
  const std::vector<int32_t> pos = position_ids(c, b);
  for (int64_t i = 0; i < n; ++i)
    if (pos[i] >= c.max_position_embeddings)
      throw InputError(fmt::format(
          "row {}: {} tokens need position {}, but the model has {} position embeddings "
          "(truncate inputs to at most {} tokens)",
          i / b.seq_len, i % b.seq_len + 1, pos[i], c.max_position_embeddings,
          max_input_tokens(c)));
  for (int64_t r = 0; r < static_cast<int64_t>(b.labels.size()); ++r)
    if (b.labels[r] != -100 && (b.labels[r] < 0 || b.labels[r] >= c.num_labels()))
      throw InputError(
          fmt::format("row {}: label {} is outside [0, {})", r, b.labels[r], c.num_labels()));
}

}  // namespace ftune
