// Deterministic length-bucketed batches and padding.
#include "data/batcher.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"

namespace ftune::data {

LengthBucketedBatcher::LengthBucketedBatcher(const std::vector<TokenizedExample>* examples,
                                             int64_t batch_size, uint64_t seed,
                                             int64_t pool_batches)
    : examples_(examples), batch_size_(batch_size), seed_(seed), pool_batches_(pool_batches) {}

std::vector<std::vector<int64_t>> LengthBucketedBatcher::epoch(int64_t epoch) const {
  const int64_t n = static_cast<int64_t>(examples_->size());
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // std::shuffle's algorithm is implementation-defined; a Fisher-Yates over mt19937_64 is not.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
  auto fisher_yates = [&](auto& v) {
    for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
      std::swap(v[i], v[rng() % (i + 1)]);
  };
  fisher_yates(order);
  const int64_t pool = batch_size_ * pool_batches_;
  std::vector<std::vector<int64_t>> batches;
  for (int64_t start = 0; start < n; start += pool) {
    const int64_t end = std::min(n, start + pool);
    std::stable_sort(order.begin() + start, order.begin() + end, [&](int64_t a, int64_t b) {
      return (*examples_)[a].input_ids.size() < (*examples_)[b].input_ids.size();
    });
    for (int64_t b = start; b < end; b += batch_size_)
      batches.emplace_back(order.begin() + b, order.begin() + std::min(end, b + batch_size_));
  }
  fisher_yates(batches);
  return batches;
}

const std::vector<int64_t>& LengthBucketedBatcher::batch(int64_t global_step) {
  FTUNE_ASSERT(global_step >= 0 && !examples_->empty(), "batch({}) of {} examples", global_step,
               examples_->size());
  const int64_t e = global_step / batches_per_epoch();
  if (e != cached_epoch_) {
    cached_ = epoch(e);
    cached_epoch_ = e;
  }
  return cached_[global_step % batches_per_epoch()];
}

std::vector<std::vector<int64_t>> length_sorted_batches(
    const std::vector<TokenizedExample>& examples, int64_t batch_size, int64_t max_tokens) {
  std::vector<int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return examples[a].input_ids.size() < examples[b].input_ids.size();
  });
  std::vector<std::vector<int64_t>> batches;
  int64_t tokens = 0;
  for (const int64_t i : order) {
    const int64_t len = static_cast<int64_t>(examples[i].input_ids.size());
    if (batches.empty() || static_cast<int64_t>(batches.back().size()) == batch_size ||
        (max_tokens > 0 && tokens + len > max_tokens)) {
      batches.emplace_back();
      tokens = 0;
    }
    batches.back().push_back(i);
    tokens += len;
  }
  return batches;
}

Batch make_batch(const std::vector<TokenizedExample>& examples, const std::vector<int64_t>& indices,
                 int32_t pad_id) {
  Batch b;
  b.size = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) b.seq_len = std::max<int64_t>(b.seq_len, examples[i].input_ids.size());
  b.input_ids.assign(b.size * b.seq_len, pad_id);
  b.token_type_ids.assign(b.size * b.seq_len, 0);
  b.attention_mask.assign(b.size * b.seq_len, 0);
  const bool lm = std::any_of(indices.begin(), indices.end(),
                              [&](int64_t i) { return !examples[i].token_labels.empty(); });
  if (lm) b.token_labels.assign(b.size * b.seq_len, -100);
  for (int64_t r = 0; r < b.size; ++r) {
    const TokenizedExample& e = examples[indices[r]];
    if (lm)
      std::copy(e.token_labels.begin(), e.token_labels.end(),
                b.token_labels.begin() + r * b.seq_len);
    for (size_t t = 0; t < e.input_ids.size(); ++t) {
      b.input_ids[r * b.seq_len + t] = e.input_ids[t];
      if (!e.token_type_ids.empty()) b.token_type_ids[r * b.seq_len + t] = e.token_type_ids[t];
      b.attention_mask[r * b.seq_len + t] = 1;
    }
    b.labels.push_back(e.label);
    b.targets.insert(b.targets.end(), e.targets.begin(), e.targets.end());
  }
  return b;
}

}  // namespace ftune::data
