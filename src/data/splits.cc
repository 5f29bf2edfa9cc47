// Stratified train/validation/test splits and k-fold assignment (see splits.h).
#include "data/splits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace ftune::data {
namespace {

// Example indices of each class, each class shuffled by its own generator.
std::vector<std::vector<int64_t>> shuffled_classes(const std::vector<int32_t>& label_ids,
                                                   uint64_t seed) {
  int32_t k = 0;
  for (int32_t id : label_ids) {
    if (id < 0) throw InputError(fmt::format("split: negative label id {}", id));
    k = std::max(k, id + 1);
  }
  std::vector<std::vector<int64_t>> classes(k);
  for (size_t i = 0; i < label_ids.size(); ++i) classes[label_ids[i]].push_back(i);
  for (int32_t c = 0; c < k; ++c) {
    std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull * (c + 1));
    std::vector<int64_t>& v = classes[c];
    for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
      std::swap(v[i], v[rng() % (i + 1)]);
  }
  return classes;
}

// Shares `total` among classes in proportion to their sizes, capped by `room` per class: floors
// first, then the remaining units to the largest remainders (ties to the lower class id).
std::vector<int64_t> apportion(const std::vector<std::vector<int64_t>>& classes, double fraction,
                               int64_t total, const std::vector<int64_t>& room) {
  const size_t k = classes.size();
  std::vector<int64_t> share(k);
  std::vector<double> remainder(k);
  int64_t given = 0;
  for (size_t c = 0; c < k; ++c) {
    const double q = fraction * static_cast<double>(classes[c].size());
    share[c] = std::min<int64_t>(static_cast<int64_t>(std::floor(q)), room[c]);
    remainder[c] = q - std::floor(q);
    given += share[c];
  }
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t pass = 0; pass < 2 && given < total; ++pass)
    for (size_t c : order) {
      if (given >= total) break;
      // First pass: one extra per class at most (within one of the exact share); second pass
      // only when caps forced the first to fall short.
      if (share[c] < room[c] && (pass == 1 || share[c] == static_cast<int64_t>(std::floor(
                                                              fraction * classes[c].size())))) {
        ++share[c];
        ++given;
      }
    }
  return share;
}

}  // namespace

SplitIndices stratified_split(const std::vector<int32_t>& label_ids, double validation_fraction,
                              double test_fraction, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(label_ids.size());
  for (auto [f, name] :
       {std::pair{validation_fraction, "validation"}, std::pair{test_fraction, "test"}})
    if (!(f >= 0 && f < 1))
      throw InputError(fmt::format("split: the {} fraction must be in [0, 1), got {}", name, f));
  const int64_t n_val = std::llround(validation_fraction * n);
  const int64_t n_test = std::llround(test_fraction * n);
  if (validation_fraction > 0 && n_val == 0)
    throw InputError(fmt::format("split: validation fraction {} of {} examples selects none",
                                 validation_fraction, n));
  if (test_fraction > 0 && n_test == 0)
    throw InputError(
        fmt::format("split: test fraction {} of {} examples selects none", test_fraction, n));
  if (n_val + n_test >= n)
    throw InputError(fmt::format(
        "split: validation {} + test {} of {} examples leave none for training", n_val, n_test, n));
  const auto classes = shuffled_classes(label_ids, seed);
  std::vector<int64_t> room(classes.size());
  for (size_t c = 0; c < classes.size(); ++c) room[c] = classes[c].size();
  const std::vector<int64_t> val = apportion(classes, validation_fraction, n_val, room);
  for (size_t c = 0; c < classes.size(); ++c) room[c] -= val[c];
  const std::vector<int64_t> test = apportion(classes, test_fraction, n_test, room);
  SplitIndices s;
  for (size_t c = 0; c < classes.size(); ++c) {
    const auto& v = classes[c];
    s.validation.insert(s.validation.end(), v.begin(), v.begin() + val[c]);
    s.test.insert(s.test.end(), v.begin() + val[c], v.begin() + val[c] + test[c]);
    s.train.insert(s.train.end(), v.begin() + val[c] + test[c], v.end());
  }
  for (auto* part : {&s.train, &s.validation, &s.test}) std::sort(part->begin(), part->end());
  return s;
}

std::vector<int32_t> stratified_fold_ids(const std::vector<int32_t>& label_ids, int64_t k,
                                         uint64_t seed) {
  const int64_t n = static_cast<int64_t>(label_ids.size());
  if (k < 2) throw InputError(fmt::format("k-fold: k must be at least 2, got {}", k));
  if (k > n) throw InputError(fmt::format("k-fold: k = {} folds but only {} examples", k, n));
  std::vector<int32_t> fold(n, -1);
  int64_t next = 0;
  for (const std::vector<int64_t>& members : shuffled_classes(label_ids, seed))
    for (int64_t i : members) {
      fold[i] = static_cast<int32_t>(next);
      next = (next + 1) % k;
    }
  return fold;
}

Fold stratified_fold(const std::vector<int32_t>& label_ids, int64_t k, int64_t fold,
                     uint64_t seed) {
  if (fold < 0 || fold >= k)
    throw InputError(fmt::format("k-fold: fold {} is outside 0..{}", fold, k - 1));
  const std::vector<int32_t> ids = stratified_fold_ids(label_ids, k, seed);
  Fold f;
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i)
    (ids[i] == fold ? f.validation : f.train).push_back(i);
  return f;
}

}  // namespace ftune::data
