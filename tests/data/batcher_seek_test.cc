// LengthBucketedBatcher::batch(step): equal to epoch(e)[i] for every step of several epochs, and
// a seek anywhere followed by sequential steps gives the same batches.
#include <gtest/gtest.h>

#include <random>

#include "data/batcher.h"

namespace ftune::data {
namespace {

std::vector<TokenizedExample> examples_of_random_lengths(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenizedExample> v(n);
  for (int i = 0; i < n; ++i) {
    v[i].input_ids.assign(1 + rng() % 40, i);
    v[i].label = i % 3;
  }
  return v;
}

TEST(BatcherSeek, BatchOfStepEqualsEpochOrderForSeveralEpochs) {
  const auto examples = examples_of_random_lengths(203, 5);
  for (int64_t batch_size : {1, 8, 16}) {
    LengthBucketedBatcher seq(&examples, batch_size, 9, /*pool_batches=*/4);
    const int64_t per_epoch = seq.batches_per_epoch();
    int64_t step = 0;
    for (int64_t e = 0; e < 4; ++e) {
      const auto batches = seq.epoch(e);
      ASSERT_EQ(static_cast<int64_t>(batches.size()), per_epoch);
      for (const auto& b : batches) {
        ASSERT_EQ(seq.batch(step), b) << "batch size " << batch_size << " step " << step;
        EXPECT_EQ(seq.epoch_of(step), e);
        ++step;
      }
    }
  }
}

TEST(BatcherSeek, SeekThenContinue) {
  const auto examples = examples_of_random_lengths(100, 6);
  LengthBucketedBatcher reference(&examples, 7, 3);
  const int64_t per_epoch = reference.batches_per_epoch();
  std::vector<std::vector<int64_t>> all;
  for (int64_t e = 0; e < 6; ++e)
    for (auto& b : reference.epoch(e)) all.push_back(b);
  // Seek forward and backward across epochs, continuing a few steps past each point.
  LengthBucketedBatcher b(&examples, 7, 3);
  for (int64_t start : {int64_t{3} * per_epoch + 5, int64_t{1}, per_epoch - 1, int64_t{0},
                        int64_t{5} * per_epoch + per_epoch - 2}) {
    for (int64_t s = start; s < std::min<int64_t>(start + per_epoch + 3, all.size()); ++s)
      ASSERT_EQ(b.batch(s), all[s]) << "start " << start << " step " << s;
  }
  // Another seed gives another order.
  LengthBucketedBatcher other(&examples, 7, 4);
  EXPECT_NE(other.batch(0), all[0]);
}

}  // namespace
}  // namespace ftune::data

namespace ftune::data {
namespace {

// Runs are compared bit for bit across versions, so the epoch order itself must never change:
// this pins it. The value was computed with epoch() as it stood on main before batch(step) was
// added (an FNV-1a hash over the indices of epochs 0-2, batch sizes 8 and 5).
TEST(BatcherSeek, EpochOrderIsPinned) {
  const auto examples = examples_of_random_lengths(157, 12);
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t batch_size : {8, 5}) {
    LengthBucketedBatcher b(&examples, batch_size, 1234, 3);
    for (int64_t e = 0; e < 3; ++e)
      for (const auto& batch : b.epoch(e)) {
        for (int64_t i : batch) h = (h ^ static_cast<uint64_t>(i)) * 0x100000001b3ull;
        h = (h ^ 0xffffull) * 0x100000001b3ull;  // batch boundary
      }
  }
  EXPECT_EQ(h, 18373501307156462079ull) << h;
}

}  // namespace
}  // namespace ftune::data
