// Stratified splits and k-fold: coverage (every example exactly once), class proportions within
// one example per class per part, exact part sizes, determinism for a seed, different seeds differ.
#include "data/splits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "data_test_util.h"

namespace ftune::data {
namespace {

using test::input_error_of;
using ::testing::HasSubstr;

// Imbalanced labels: class c has sizes[c] examples, interleaved randomly.
std::vector<int32_t> labels_with(const std::vector<int>& sizes, uint64_t seed) {
  std::vector<int32_t> ids;
  for (size_t c = 0; c < sizes.size(); ++c)
    ids.insert(ids.end(), sizes[c], static_cast<int32_t>(c));
  std::mt19937_64 rng(seed);
  for (int64_t i = static_cast<int64_t>(ids.size()) - 1; i > 0; --i)
    std::swap(ids[i], ids[rng() % (i + 1)]);
  return ids;
}

std::vector<int64_t> class_counts(const std::vector<int32_t>& ids, const std::vector<int64_t>& part,
                                  size_t k) {
  std::vector<int64_t> n(k);
  for (int64_t i : part) ++n[ids[i]];
  return n;
}

TEST(Split, CoversEveryExampleOnceWithProportionsPerClass) {
  const std::vector<int> sizes = {103, 41, 7, 1};
  const auto ids = labels_with(sizes, 1);
  const int64_t n = static_cast<int64_t>(ids.size());
  const SplitIndices s = stratified_split(ids, 0.2, 0.1, 42);
  EXPECT_EQ(static_cast<int64_t>(s.validation.size()), std::llround(0.2 * n));
  EXPECT_EQ(static_cast<int64_t>(s.test.size()), std::llround(0.1 * n));
  std::vector<int> seen(n);
  for (const auto* part : {&s.train, &s.validation, &s.test}) {
    EXPECT_TRUE(std::is_sorted(part->begin(), part->end()));
    for (int64_t i : *part) ++seen[i];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  const auto val = class_counts(ids, s.validation, sizes.size());
  const auto test = class_counts(ids, s.test, sizes.size());
  for (size_t c = 0; c < sizes.size(); ++c) {
    EXPECT_LE(std::abs(val[c] - 0.2 * sizes[c]), 1.0) << "class " << c;
    EXPECT_LE(std::abs(test[c] - 0.1 * sizes[c]), 1.0) << "class " << c;
  }
}

TEST(Split, DeterministicForASeedAndDifferentAcrossSeeds) {
  const auto ids = labels_with({50, 50, 20}, 2);
  const SplitIndices a = stratified_split(ids, 0.25, 0.0, 7);
  const SplitIndices b = stratified_split(ids, 0.25, 0.0, 7);
  const SplitIndices c = stratified_split(ids, 0.25, 0.0, 8);
  EXPECT_EQ(a.validation, b.validation);
  EXPECT_EQ(a.train, b.train);
  EXPECT_TRUE(a.test.empty());
  EXPECT_NE(a.validation, c.validation);
  EXPECT_EQ(a.validation.size(), c.validation.size());
}

TEST(Split, BadFractionsAreErrors) {
  const std::vector<int32_t> ids = {0, 1, 0, 1};
  EXPECT_THAT(input_error_of([&] { stratified_split(ids, 1.0, 0.0, 1); }),
              HasSubstr("validation fraction must be in [0, 1), got 1"));
  EXPECT_THAT(input_error_of([&] { stratified_split(ids, 0.5, 0.5, 1); }),
              HasSubstr("leave none for training"));
  EXPECT_THAT(input_error_of([&] { stratified_split(ids, 0.1, 0.0, 1); }),
              HasSubstr("validation fraction 0.1 of 4 examples selects none"));
}

TEST(KFold, EveryExampleInExactlyOneValidationFold) {
  const std::vector<int> sizes = {97, 30, 11, 3};
  const auto ids = labels_with(sizes, 3);
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t k : {2, 5, 7}) {
    std::vector<int> in_validation(n);
    for (int64_t f = 0; f < k; ++f) {
      const Fold fold = stratified_fold(ids, k, f, 11);
      EXPECT_EQ(static_cast<int64_t>(fold.train.size() + fold.validation.size()), n);
      std::set<int64_t> train(fold.train.begin(), fold.train.end());
      for (int64_t i : fold.validation) {
        ++in_validation[i];
        EXPECT_FALSE(train.count(i)) << i;
      }
      // Proportions: within one example per class of n_c / k, and fold sizes within one.
      const auto counts = class_counts(ids, fold.validation, sizes.size());
      for (size_t c = 0; c < sizes.size(); ++c)
        EXPECT_LE(std::abs(counts[c] - double(sizes[c]) / k), 1.0) << "k " << k << " class " << c;
      EXPECT_LE(std::abs(double(fold.validation.size()) - double(n) / k), 1.0);
    }
    EXPECT_TRUE(
        std::all_of(in_validation.begin(), in_validation.end(), [](int v) { return v == 1; }))
        << "k " << k;
  }
}

TEST(KFold, DeterministicForASeedAndDifferentAcrossSeeds) {
  const auto ids = labels_with({40, 40}, 4);
  EXPECT_EQ(stratified_fold_ids(ids, 5, 1), stratified_fold_ids(ids, 5, 1));
  EXPECT_NE(stratified_fold_ids(ids, 5, 1), stratified_fold_ids(ids, 5, 2));
}

TEST(KFold, BadArgumentsAreErrors) {
  const std::vector<int32_t> ids = {0, 1, 0};
  EXPECT_EQ(input_error_of([&] { stratified_fold_ids(ids, 1, 0); }),
            "k-fold: k must be at least 2, got 1");
  EXPECT_EQ(input_error_of([&] { stratified_fold_ids(ids, 4, 0); }),
            "k-fold: k = 4 folds but only 3 examples");
  EXPECT_EQ(input_error_of([&] { stratified_fold(ids, 2, 2, 0); }),
            "k-fold: fold 2 is outside 0..1");
}

TEST(Split, SelectTakesThePartInOrder) {
  const std::vector<std::string> all = {"a", "b", "c", "d"};
  EXPECT_EQ(select(all, {3, 0, 2}), (std::vector<std::string>{"d", "a", "c"}));
  const auto ids = labels_with({30, 10}, 9);
  const Fold f = stratified_fold(ids, 4, 1, 3);
  const std::vector<int32_t> val_labels = select(ids, f.validation);
  ASSERT_EQ(val_labels.size(), f.validation.size());
  for (size_t i = 0; i < val_labels.size(); ++i) EXPECT_EQ(val_labels[i], ids[f.validation[i]]);
  const auto ones = std::count(val_labels.begin(), val_labels.end(), 1);
  EXPECT_TRUE(ones == 2 || ones == 3) << ones;  // 10 examples of class 1 over 4 folds
}

}  // namespace
}  // namespace ftune::data
