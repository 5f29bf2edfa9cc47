// BatchPrefetcher: batches in step order equal to make_batch on the batcher's indices, a bounded
// queue, waiting time measured, early stop and destruction without deadlock, and a producer's
// exception rethrown by next() after the batches made before it.
#include "data/prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

namespace ftune::data {
namespace {

using namespace std::chrono_literals;

std::vector<TokenizedExample> examples_of_random_lengths(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenizedExample> v(n);
  for (int i = 0; i < n; ++i) {
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int t = 0; t < len; ++t) v[i].input_ids.push_back(static_cast<int32_t>(rng() % 1000));
    v[i].token_type_ids.assign(len, i % 2);
    v[i].label = i % 4;
  }
  return v;
}

void expect_same_batch(const Batch& a, const Batch& b, int64_t step) {
  EXPECT_EQ(a.size, b.size) << "step " << step;
  EXPECT_EQ(a.seq_len, b.seq_len) << "step " << step;
  EXPECT_EQ(a.input_ids, b.input_ids) << "step " << step;
  EXPECT_EQ(a.token_type_ids, b.token_type_ids) << "step " << step;
  EXPECT_EQ(a.attention_mask, b.attention_mask) << "step " << step;
  EXPECT_EQ(a.labels, b.labels) << "step " << step;
}

// A batch whose only content is its step number (for order tests of the queue itself).
Batch step_batch(int64_t step) {
  Batch b;
  b.size = 1;
  b.labels = {static_cast<int32_t>(step)};
  return b;
}

TEST(Prefetcher, TrainingBatchesInOrderEqualToMakeBatch) {
  const auto examples = examples_of_random_lengths(150, 1);
  const LengthBucketedBatcher batcher(&examples, 8, 17, 4);
  LengthBucketedBatcher reference = batcher;
  const int64_t start = 5, end = start + 3 * batcher.batches_per_epoch();
  for (int64_t depth : {1, 4}) {
    BatchPrefetcher p(BatchPrefetcher::training_batches(batcher, &examples, /*pad_id=*/-7), start,
                      end, depth);
    for (int64_t step = start; step < end; ++step) {
      ASSERT_FALSE(p.done());
      ASSERT_EQ(p.next_step(), step);
      expect_same_batch(p.next(), make_batch(examples, reference.batch(step), -7), step);
    }
    EXPECT_TRUE(p.done());
  }
}

TEST(Prefetcher, QueueIsBoundedByDepth) {
  std::atomic<int64_t> made{0};
  BatchPrefetcher p(
      [&](int64_t step) {
        ++made;
        return step_batch(step);
      },
      0, 1000, 3);
  auto wait_for = [&](int64_t want) {
    for (int i = 0; i < 400 && made.load() < want; ++i) std::this_thread::sleep_for(5ms);
  };
  wait_for(3);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(made.load(), 3);  // depth batches ahead, no more
  for (int i = 0; i < 2; ++i) EXPECT_EQ(p.next().labels[0], i);
  wait_for(5);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(made.load(), 5);
}

TEST(Prefetcher, MeasuresTheTimeTheConsumerWaits) {
  BatchPrefetcher p(
      [](int64_t step) {
        std::this_thread::sleep_for(20ms);
        return step_batch(step);
      },
      0, 5, 2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(p.next().labels[0], i);
  // Five batches of 20 ms each made while the consumer did nothing else: it waited for nearly
  // all of that time (at least the first batch's).
  EXPECT_GE(p.wait_seconds(), 0.015);
}

TEST(Prefetcher, EarlyStopAndDestructionDoNotDeadlock) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    // Consumer stops after three of a million steps with the queue full.
    BatchPrefetcher p(step_batch, 0, 1000000, 2);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(p.next().labels[0], i);
    std::this_thread::sleep_for(20ms);
  }
  {
    BatchPrefetcher p(step_batch, 0, 1000000, 4);  // destroyed without a single next()
  }
  {
    BatchPrefetcher p(step_batch, 10, 1000000, 1);
    EXPECT_EQ(p.next().labels[0], 10);
    p.stop();
    p.stop();  // idempotent
    EXPECT_THROW(p.next(), InternalError);
  }
  {
    BatchPrefetcher p(step_batch, 3, 3, 4);  // empty range
    EXPECT_TRUE(p.done());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(Prefetcher, ProducerExceptionIsRethrownAfterTheEarlierBatches) {
  BatchPrefetcher p(
      [](int64_t step) {
        if (step == 7) throw std::runtime_error("bad batch at step 7");
        return step_batch(step);
      },
      4, 20, 4);
  for (int64_t step = 4; step < 7; ++step) EXPECT_EQ(p.next().labels[0], step);
  try {
    p.next();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "bad batch at step 7");
  }
  EXPECT_EQ(p.next_step(), 7);
  EXPECT_THROW(p.next(), std::runtime_error);  // stays failed
}

}  // namespace
}  // namespace ftune::data
