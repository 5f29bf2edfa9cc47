// Batch validation and position ids by the family's rule (see batch.h).
#include "models/batch.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "models/input_limits.h"

namespace ftune {

std::vector<int32_t> position_ids(const ModelSpec& model, const Batch& b) {
  std::vector<int32_t> pos(b.size * b.seq_len);
  for (int64_t r = 0; r < b.size; ++r)
    model.backbone().row_positions(b.input_ids.data() + r * b.seq_len, b.seq_len,
                                   pos.data() + r * b.seq_len);
  return pos;
}

void validate_batch(const ModelSpec& model, const Batch& b) {
  const ModelInfo& c = model.info();
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
  if (!b.token_labels.empty() && static_cast<int64_t>(b.token_labels.size()) != n)
    throw InputError(fmt::format("batch of {} x {} tokens has {} token labels", b.size, b.seq_len,
                                 b.token_labels.size()));
  for (int64_t i = 0; i < static_cast<int64_t>(b.token_labels.size()); ++i)
    if (b.token_labels[i] != -100 && (b.token_labels[i] < 0 || b.token_labels[i] >= c.vocab_size))
      throw InputError(fmt::format(
          "row {}: token label {} at position {} is outside the vocabulary of {} (or -100)",
          i / b.seq_len, b.token_labels[i], i % b.seq_len, c.vocab_size));
  if (!b.targets.empty() && static_cast<int64_t>(b.targets.size()) != b.size * c.num_labels())
    throw InputError(
        fmt::format("batch of {} rows has {} float targets; the model has {} scores "
                    "per row",
                    b.size, b.targets.size(), c.num_labels()));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / b.seq_len, col = i % b.seq_len;
    if (b.input_ids[i] < 0 || b.input_ids[i] >= c.vocab_size)
      throw InputError(
          fmt::format("row {}: token id {} at position {} is outside the vocabulary of {}", row,
                      b.input_ids[i], col, c.vocab_size));
    if (!b.token_type_ids.empty() && c.type_vocab_size > 0 &&
        (b.token_type_ids[i] < 0 || b.token_type_ids[i] >= c.type_vocab_size))
      throw InputError(
          fmt::format("row {}: token type {} at position {} is outside [0, {}) (type_vocab_size)",
                      row, b.token_type_ids[i], col, c.type_vocab_size));
    if (b.attention_mask[i] != 0 && b.attention_mask[i] != 1)
      throw InputError(
          fmt::format("row {}: attention mask value {} at position {} (expected 0 or 1)", row,
                      b.attention_mask[i], col));
  }
  const std::vector<int32_t> pos = position_ids(model, b);
  for (int64_t i = 0; i < n; ++i)
    if (pos[i] >= c.max_position_embeddings)
      throw InputError(fmt::format(
          "row {}: {} tokens need position {}, but the model has {} position embeddings "
          "(truncate inputs to at most {} tokens)",
          i / b.seq_len, i % b.seq_len + 1, pos[i], c.max_position_embeddings,
          c.max_tokens));
  for (int64_t r = 0; r < static_cast<int64_t>(b.labels.size()); ++r)
    if (b.labels[r] != -100 && (b.labels[r] < 0 || b.labels[r] >= c.num_labels()))
      throw InputError(
          fmt::format("row {}: label {} is outside [0, {})", r, b.labels[r], c.num_labels()));
}

}  // namespace ftune
