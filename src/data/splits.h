// Seeded, label-stratified splits of one dataset: train/validation(/test) by fractions, and k-fold
// cross-validation for the hyperparameter search. Both shuffle each class with a generator keyed
// by (seed, class) — a Fisher-Yates over mt19937_64, whose output the C++ standard fixes, so a
// seed gives the same split on every platform — and deal the class out so each part gets its
// share of every label.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ftune::data {

struct SplitIndices {
  std::vector<int64_t> train, validation, test;  // example indices, each sorted ascending
};

// Splits examples with the given label ids (0..K-1) into train / validation / test. The
// validation and test sizes are round(n * fraction); they are shared out among the classes in
// proportion to the class sizes (largest remainder), so every class keeps its proportion in every
// part to within one example. test_fraction 0: no test part. InputError when a fraction is
// outside [0, 1), they leave no training example, or a positive fraction selects no example.
SplitIndices stratified_split(const std::vector<int32_t>& label_ids, double validation_fraction,
                              double test_fraction, uint64_t seed);

// The fold (0..k-1) of every example for stratified k-fold: each class, shuffled, is dealt round
// robin over the folds, starting where the previous class stopped, so each fold holds
// floor(n_c/k) or ceil(n_c/k) examples of class c and the fold sizes differ by at most one.
// InputError when k < 2 or k exceeds the number of examples.
std::vector<int32_t> stratified_fold_ids(const std::vector<int32_t>& label_ids, int64_t k,
                                         uint64_t seed);

struct Fold {
  std::vector<int64_t> train, validation;  // sorted ascending
};
// Fold `fold` of stratified k-fold: its examples are the validation part, the rest train.
Fold stratified_fold(const std::vector<int32_t>& label_ids, int64_t k, int64_t fold, uint64_t seed);

// The elements of `all` at `indices`, in that order (a split's part of the examples, label ids or
// tokenized examples: tokenize the file once, then select each part).
template <typename T>
std::vector<T> select(const std::vector<T>& all, const std::vector<int64_t>& indices) {
  std::vector<T> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(all.at(static_cast<size_t>(i)));
  return out;
}

}  // namespace ftune::data
