// The batches LoadedClassifier::predict runs (models/predictor.h): every row exactly once, lengths
// ascending, at most batch_size rows a batch, and a batch's padding within kPaddingSlack of its
// real tokens wherever it holds more than one row; a mix of short and long rows is cut where
// fixed batches would pad, and rows of one length stay in full batches.
#include <algorithm>
#include <random>
#include <vector>

#include "models/predictor.h"
#include "test_util.h"

namespace ftune::test {
namespace {

std::vector<data::TokenizedExample> rows_of_lengths(const std::vector<int64_t>& lengths) {
  std::vector<data::TokenizedExample> rows(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) rows[i].input_ids.assign(lengths[i], 7);
  return rows;
}

void expect_scoring_batches(const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                            const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int> seen(rows.size(), 0);
  int64_t previous = 0;
  for (const auto& b : batches) {
    ASSERT_FALSE(b.empty());
    ASSERT_LE(static_cast<int64_t>(b.size()), batch_size);
    int64_t real = 0, longest = 0;
    for (const int64_t i : b) {
      const int64_t len = static_cast<int64_t>(rows[i].input_ids.size());
      ASSERT_GE(len, previous) << "lengths not ascending";
      previous = len;
      real += len;
      longest = std::max(longest, len);
      ++seen[i];
    }
    if (b.size() > 1)
      ASSERT_LE(static_cast<double>(longest * static_cast<int64_t>(b.size()) - real),
                kPaddingSlack * static_cast<double>(real) + 1e-9);
  }
  for (const int s : seen) ASSERT_EQ(s, 1);
}

TEST(ScoringBatches, EveryRowOnceAscendingWithinTheBatchSizeAndThePaddingBound) {
  std::mt19937 rng(3);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 300; ++i) {  // a reranker's mix: short pairs and passages up to 256
    const int kind = static_cast<int>(rng() % 4);
    lengths.push_back(kind == 0 ? 15 + rng() % 10 : kind == 1 ? 40 + rng() % 30
                      : kind == 2 ? 100 + rng() % 60 : 256);
  }
  const auto rows = rows_of_lengths(lengths);
  const auto batches = scoring_batches(rows, 32);
  expect_scoring_batches(rows, 32, batches);
  // Fixed batches of 32 would have padded more: the cut made more, smaller batches.
  EXPECT_GT(batches.size(), (rows.size() + 31) / 32);
}

TEST(ScoringBatches, RowsOfOneLengthFillWholeBatches) {
  const auto rows = rows_of_lengths(std::vector<int64_t>(70, 40));
  const auto batches = scoring_batches(rows, 32);
  expect_scoring_batches(rows, 32, batches);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].size(), 32u);
  EXPECT_EQ(batches[1].size(), 32u);
  EXPECT_EQ(batches[2].size(), 6u);
}

TEST(ScoringBatches, AShortRowBeforeLongOnesGetsABatchOfItsOwn) {
  const auto rows = rows_of_lengths({200, 10, 201, 202});
  const auto batches = scoring_batches(rows, 32);
  expect_scoring_batches(rows, 32, batches);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], std::vector<int64_t>{1});
}

}  // namespace
}  // namespace ftune::test
