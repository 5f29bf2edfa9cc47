// Step batches and their micro-batches: every batch of the length-bucketed batcher holds its rows
// in order of length (so contiguous row ranges pad little), and slice_rows cuts a padded batch
// into exactly the batches make_batch pads from those rows' examples directly.
#include <gtest/gtest.h>

#include <random>

#include "data/batcher.h"

namespace ftune::data {
namespace {

std::vector<TokenizedExample> random_examples(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenizedExample> v(n);
  for (int i = 0; i < n; ++i) {
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int t = 0; t < len; ++t) {
      v[i].input_ids.push_back(100 + static_cast<int32_t>(rng() % 1000));
      v[i].token_type_ids.push_back(t > len / 2);
    }
    v[i].label = i % 3 == 0 ? -100 : i % 2;
  }
  return v;
}

TEST(StepBatch, RowsOfEveryBatchAreOrderedByLength) {
  const auto examples = random_examples(301, 4);
  LengthBucketedBatcher batcher(&examples, 24, 11, /*pool_batches=*/3);
  for (int64_t e = 0; e < 3; ++e)
    for (const auto& batch : batcher.epoch(e))
      for (size_t r = 1; r < batch.size(); ++r)
        ASSERT_LE(examples[batch[r - 1]].input_ids.size(), examples[batch[r]].input_ids.size());
}

TEST(StepBatch, SliceRowsEqualsPaddingThoseRowsDirectly) {
  const auto examples = random_examples(40, 5);
  std::vector<int64_t> rows(40);
  for (int64_t i = 0; i < 40; ++i) rows[i] = (i * 17) % 40;  // any order, mixed lengths
  const Batch whole = make_batch(examples, rows, /*pad_id=*/7);
  for (const auto [r0, n] :
       {std::pair<int64_t, int64_t>{0, 40}, {0, 6}, {6, 6}, {36, 4}, {13, 1}}) {
    const Batch cut = slice_rows(whole, r0, n);
    const Batch direct =
        make_batch(examples, std::vector<int64_t>(rows.begin() + r0, rows.begin() + r0 + n), 7);
    EXPECT_EQ(cut.size, direct.size);
    EXPECT_EQ(cut.seq_len, direct.seq_len) << r0;
    EXPECT_EQ(cut.input_ids, direct.input_ids) << r0;
    EXPECT_EQ(cut.token_type_ids, direct.token_type_ids) << r0;
    EXPECT_EQ(cut.attention_mask, direct.attention_mask) << r0;
    EXPECT_EQ(cut.labels, direct.labels) << r0;
  }
}

}  // namespace
}  // namespace ftune::data
