// Length-bucketed batching with dynamic padding. For each epoch the examples are shuffled with a
// generator seeded by (seed, epoch), cut into pools of `pool_batches` batches, each pool sorted by
// length and cut into batches, and the batch order shuffled again: batches hold examples of
// similar length (little padding) while the order stays random. Within a batch the rows are in
// order of length, so contiguous row ranges of it (the trainer's micro-batches, cut from a batch
// of the effective size) pad little too. Deterministic for a seed and epoch, so a run can be
// reproduced — and resumed at any step — exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "data/examples.h"
#include "data/batch.h"

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

  // The batch at `global_step` counted from the start of epoch 0: epoch(step / batches_per_epoch())
  // [step % batches_per_epoch()]. The current epoch's batches are cached, so stepping through in
  // order costs O(1) per call (amortised) and a seek to any step costs one epoch permutation,
  // whatever the step number. The reference stays valid until a call for another epoch. Not
  // thread-safe (one batcher per thread; the object is cheap to copy).
  const std::vector<int64_t>& batch(int64_t global_step);
  // The epoch `global_step` falls in.
  int64_t epoch_of(int64_t global_step) const { return global_step / batches_per_epoch(); }

 private:
  const std::vector<TokenizedExample>* examples_;
  int64_t batch_size_;
  uint64_t seed_;
  int64_t pool_batches_;
  int64_t cached_epoch_ = -1;
  std::vector<std::vector<int64_t>> cached_;
};

// Batches for evaluation and prediction, where order does not matter: examples sorted by length
// (stable) and cut into batches of batch_size rows, so each is padded only to its own longest
// example; with max_tokens > 0 (packed batches) also of at most that many tokens.
std::vector<std::vector<int64_t>> length_sorted_batches(
    const std::vector<TokenizedExample>& examples, int64_t batch_size, int64_t max_tokens = 0);

// Pads the given examples into a right-padded Batch (pad id for input_ids, 0 mask, 0 types;
// empty token_type_ids count as all 0; a causal LM's token labels -100 over the padding).
Batch make_batch(const std::vector<TokenizedExample>& examples, const std::vector<int64_t>& indices,
                 int32_t pad_id);

}  // namespace ftune::data
