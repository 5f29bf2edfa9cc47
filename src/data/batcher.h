// Length-bucketed batching with dynamic padding. For each epoch the examples are shuffled with a
// generator seeded by (seed, epoch), cut into pools of `pool_batches` batches, each pool sorted by
// length and cut into batches, and the batch order shuffled again: batches hold examples of
// similar length (little padding) while the order stays random. Deterministic for a seed and
// epoch, so a run can be reproduced — and resumed at any step — exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "data/examples.h"
#include "models/batch.h"

namespace ftune::data {

class LengthBucketedBatcher {
 public:
  LengthBucketedBatcher(const std::vector<TokenizedExample>* examples, int64_t batch_size,
                        uint64_t seed, int64_t pool_batches = 32);

  int64_t batches_per_epoch() const {
    return (static_cast<int64_t>(examples_->size()) + batch_size_ - 1) / batch_size_;
  }
  // Indices of the examples of every batch of `epoch`, in training order.
  std::vector<std::vector<int64_t>> epoch(int64_t epoch) const;

 private:
  const std::vector<TokenizedExample>* examples_;
  int64_t batch_size_;
  uint64_t seed_;
  int64_t pool_batches_;
};

// Batches for evaluation and prediction, where order does not matter: examples sorted by length
// (stable) and cut into batches, so each is padded only to its own longest example.
std::vector<std::vector<int64_t>> length_sorted_batches(
    const std::vector<TokenizedExample>& examples, int64_t batch_size);

// Pads the given examples into a right-padded Batch (pad id for input_ids, 0 mask, 0 types;
// empty token_type_ids count as all 0).
Batch make_batch(const std::vector<TokenizedExample>& examples, const std::vector<int64_t>& indices,
                 int32_t pad_id);

}  // namespace ftune::data
