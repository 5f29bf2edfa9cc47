// Thread pool: coverage of the range, static chunking, exceptions, nesting, flush-to-zero, and
// regions back to back (workers still spinning) or after the workers went to sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/float_env.h"
#include "core/thread_pool.h"

namespace ftune {
namespace {

TEST(ThreadPool, CoversRangeOnceInContiguousChunks) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 4, 5, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> chunks{0};
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      ++chunks;
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << n << " " << i;
    EXPECT_LE(chunks.load(), 4);
  }
}

TEST(ThreadPool, MinChunkLimitsTheSplit) {
  ThreadPool pool(4);
  std::atomic<int> chunks{0};
  pool.parallel_for(
      10, [&](int64_t, int64_t) { ++chunks; }, 6);
  EXPECT_EQ(chunks.load(), 2);
}

TEST(ThreadPool, RethrowsTheFirstExceptionAfterAllChunks) {
  ThreadPool pool(3);
  std::atomic<int> done{0};
  EXPECT_THROW(pool.parallel_for(3,
                                 [&](int64_t b, int64_t) {
                                   ++done;
                                   if (b == 1) throw InputError("boom");
                                 }),
               InputError);
  EXPECT_EQ(done.load(), 3);
  // The pool still works afterwards.
  std::atomic<int> after{0};
  pool.parallel_for(3, [&](int64_t b, int64_t e) { after += static_cast<int>(e - b); });
  EXPECT_EQ(after.load(), 3);
}

TEST(ThreadPool, NestedRegionsRunSerially) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    pool.parallel_for(5, [&](int64_t b, int64_t e) { inner += static_cast<int>(e - b); });
  });
  EXPECT_EQ(inner.load(), 10);
}

// Thousands of short regions back to back, as a training step opens them: each sees every chunk
// done before the next starts (a chunk's write is read by the caller right after), whether the
// workers were still spinning (no pause) or asleep (pauses past ThreadPool::kSpinMicros), with
// fewer chunks than workers at times (idle workers must not count in a region's completion).
TEST(ThreadPool, BackToBackRegionsSpinningOrAsleep) {
  ThreadPool pool(4);
  std::vector<int64_t> slot(4, 0);
  int64_t expected = 0;
  for (int r = 0; r < 20000; ++r) {
    const int64_t n = 1 + r % 4;  // 1 to 4 chunks
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) slot[i] += r;
    });
    for (int64_t i = 0; i < n; ++i) expected += r;
    if (r % 2000 == 1999)
      std::this_thread::sleep_for(std::chrono::microseconds(4 * ThreadPool::kSpinMicros));
  }
  int64_t total = 0;
  for (int64_t v : slot) total += v;
  EXPECT_EQ(total, expected);
  std::atomic<int> tasks{0};
  pool.parallel_tasks(100, [&](int64_t) { ++tasks; });
  EXPECT_EQ(tasks.load(), 100);
}

TEST(ThreadPool, TasksRunExactlyOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(257);
  pool.parallel_tasks(257, [&](int64_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, WorkersFlushDenormalsToZero) {
  ThreadPool pool(2);
  std::atomic<int> ftz{0};
  pool.parallel_for(
      2, [&](int64_t, int64_t) { ftz += flush_to_zero_enabled(); }, 1);
  enable_flush_to_zero();
  EXPECT_TRUE(flush_to_zero_enabled());
  volatile float tiny = 1e-38f;
  volatile float r = tiny * 0.01f;  // denormal result flushes to zero
  EXPECT_EQ(r, 0.0f);
#if defined(__x86_64__)
  EXPECT_EQ(ftz.load(), 2);
#endif
}

}  // namespace
}  // namespace ftune
