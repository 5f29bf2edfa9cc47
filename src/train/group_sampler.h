// The step batches of listwise training (training.loss: listwise): whole query groups, each of
// data.group_size rows, 1 positive first and group_size - 1 negatives, redrawn every epoch as
// FlagEmbedding's reranker dataset draws its train_group_size passages:
//   - the positive: one of the group's relevant rows (relevance > 0), uniformly;
//   - the negatives: group_size - 1 of its rows with relevance 0, without replacement when it has
//     that many; with fewer, FlagEmbedding's rule: the negatives repeated
//     ceil((group_size - 1) / n) times and group_size - 1 drawn from that pool without
//     replacement (so each negative appears about equally often, some twice);
//   - a group without a positive or without a negative teaches nothing: skipped and counted.
// The groups' order is shuffled every epoch. Everything comes from one mt19937_64 keyed by
// (seed, epoch), so an epoch is the same on every platform and a run resumes at any step exactly.
// A step holds groups_per_step groups (the effective batch counts groups), the last step of an
// epoch the rest; its rows are the groups one after the other, so micro-batches of a multiple of
// group_size rows never split a group, and its groups are ordered by their longest row (stable),
// so a micro-batch's groups are of similar length and pad little (as LengthBucketedBatcher's
// rows).
#pragma once

#include <cstdint>
#include <vector>

#include "data/examples.h"

namespace ftune {

class GroupSampler {
 public:
  GroupSampler(const std::vector<data::TokenizedExample>* examples, int64_t group_size,
               int64_t groups_per_step, uint64_t seed);

  int64_t group_size() const { return group_size_; }
  int64_t groups() const { return static_cast<int64_t>(groups_.size()); }  // usable groups
  int64_t skipped_without_positive() const { return without_positive_; }
  int64_t skipped_without_negative() const { return without_negative_; }
  int64_t padded_groups() const {
    return padded_groups_;
  }  // groups with < group_size - 1 negatives
  int64_t batches_per_epoch() const { return (groups() + groups_per_step_ - 1) / groups_per_step_; }
  // Example indices of every step of `epoch`, in training order.
  std::vector<std::vector<int64_t>> epoch(int64_t epoch) const;
  // The step at `global_step` from the start of epoch 0 (the epoch cached, as
  // LengthBucketedBatcher::batch).
  const std::vector<int64_t>& batch(int64_t global_step);
  int64_t epoch_of(int64_t global_step) const { return global_step / batches_per_epoch(); }

 private:
  struct Group {
    std::vector<int64_t> positives, negatives;
  };
  void sort_by_length(std::vector<int64_t>& rows) const;
  const std::vector<data::TokenizedExample>* examples_;
  int64_t group_size_, groups_per_step_;
  uint64_t seed_;
  std::vector<Group> groups_;
  int64_t without_positive_ = 0, without_negative_ = 0, padded_groups_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<std::vector<int64_t>> cached_;
};

}  // namespace ftune
