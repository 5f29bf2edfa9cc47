// Thread pool: coverage of the range, static chunking, exceptions, nesting, flush-to-zero.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
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
