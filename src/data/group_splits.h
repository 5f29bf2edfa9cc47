// Group-aware splits and k-fold: every query group's examples land in one part, so no query is in
// two folds or in both train and validation. The groups (and each example without a group, a
// group of its own) are shuffled with a generator keyed by the seed (Fisher-Yates over
// mt19937_64, the same on every platform) and dealt out:
//   split: in shuffled order, groups go to validation until it holds round(n * validation
//          fraction) examples or more, then to test likewise, the rest to train;
//   k-fold: in shuffled order, each group to the fold holding the fewest examples so far (the
//          lowest fold on ties), so fold sizes differ by at most the largest group.
// Not stratified by label: a group holds both its positives and its negatives.
#pragma once

#include <cstdint>
#include <vector>

#include "data/splits.h"

namespace ftune::data {

// group_ids: per example, its group (>= 0) or -1. InputError when a fraction is outside [0, 1),
// a positive fraction selects no group, or no training example is left.
SplitIndices group_split(const std::vector<int64_t>& group_ids, double validation_fraction,
                         double test_fraction, uint64_t seed);

// The fold (0..k-1) of every example. InputError when k < 2 or k exceeds the number of groups.
std::vector<int32_t> group_fold_ids(const std::vector<int64_t>& group_ids, int64_t k,
                                    uint64_t seed);
Fold group_fold(const std::vector<int64_t>& group_ids, int64_t k, int64_t fold, uint64_t seed);

}  // namespace ftune::data
