// Group-aware train/validation/test splits and k-fold assignment (see group_splits.h).
#include "data/group_splits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "core/error.h"

namespace ftune::data {
namespace {

// The examples of each group (a group per example without one), groups in first-appearance
// order, then shuffled.
std::vector<std::vector<int64_t>> shuffled_groups(const std::vector<int64_t>& group_ids,
                                                  uint64_t seed) {
  std::vector<std::vector<int64_t>> groups;
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < group_ids.size(); ++i) {
    if (group_ids[i] < 0) {
      groups.push_back({static_cast<int64_t>(i)});
      continue;
    }
    auto [it, fresh] = index.emplace(group_ids[i], groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(static_cast<int64_t>(i));
  }
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0xBF58476D1CE4E5B9ull);
  for (int64_t i = static_cast<int64_t>(groups.size()) - 1; i > 0; --i)
    std::swap(groups[i], groups[rng() % (i + 1)]);
  return groups;
}

}  // namespace

SplitIndices group_split(const std::vector<int64_t>& group_ids, double validation_fraction,
                         double test_fraction, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(group_ids.size());
  for (auto [f, name] :
       {std::pair{validation_fraction, "validation"}, std::pair{test_fraction, "test"}})
    if (!(f >= 0 && f < 1))
      throw InputError(fmt::format("split: the {} fraction must be in [0, 1), got {}", name, f));
  const int64_t n_val = std::llround(validation_fraction * n);
  const int64_t n_test = std::llround(test_fraction * n);
  if ((validation_fraction > 0 && n_val == 0) || (test_fraction > 0 && n_test == 0))
    throw InputError(fmt::format("split: validation {} / test {} of {} examples selects no group",
                                 validation_fraction, test_fraction, n));
  SplitIndices s;
  for (const auto& g : shuffled_groups(group_ids, seed)) {
    auto* part = static_cast<int64_t>(s.validation.size()) < n_val ? &s.validation
                 : static_cast<int64_t>(s.test.size()) < n_test    ? &s.test
                                                                   : &s.train;
    part->insert(part->end(), g.begin(), g.end());
  }
  if (s.train.empty())
    throw InputError(fmt::format(
        "split: validation {} + test {} of {} examples (whole query groups) leave no group for "
        "training",
        validation_fraction, test_fraction, n));
  for (auto* part : {&s.train, &s.validation, &s.test}) std::sort(part->begin(), part->end());
  return s;
}

std::vector<int32_t> group_fold_ids(const std::vector<int64_t>& group_ids, int64_t k,
                                    uint64_t seed) {
  if (k < 2) throw InputError(fmt::format("k-fold: k must be at least 2, got {}", k));
  const auto groups = shuffled_groups(group_ids, seed);
  if (k > static_cast<int64_t>(groups.size()))
    throw InputError(
        fmt::format("k-fold: k = {} folds but only {} query groups", k, groups.size()));
  std::vector<int32_t> fold(group_ids.size(), -1);
  std::vector<int64_t> size(k, 0);
  for (const auto& g : groups) {
    const int64_t f = std::min_element(size.begin(), size.end()) - size.begin();
    size[f] += static_cast<int64_t>(g.size());
    for (int64_t i : g) fold[i] = static_cast<int32_t>(f);
  }
  return fold;
}

Fold group_fold(const std::vector<int64_t>& group_ids, int64_t k, int64_t fold, uint64_t seed) {
  if (fold < 0 || fold >= k)
    throw InputError(fmt::format("k-fold: fold {} is outside 0..{}", fold, k - 1));
  const std::vector<int32_t> ids = group_fold_ids(group_ids, k, seed);
  Fold f;
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i)
    (ids[i] == fold ? f.validation : f.train).push_back(i);
  return f;
}

}  // namespace ftune::data
