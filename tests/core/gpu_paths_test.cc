// The GPU path counters (core/gpu_paths.h): every path has its own summary name, counts and
// seconds add up, and a run's share is the difference of two snapshots.
#include "core/gpu_paths.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ftune {
namespace {

TEST(GpuPaths, EveryPathHasItsOwnName) {
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(GpuPath::kCount); ++i) {
    const std::string n = gpu_path_name(static_cast<GpuPath>(i));
    EXPECT_NE(n, "unknown") << i;
    EXPECT_TRUE(names.insert(n).second) << n;
  }
}

TEST(GpuPaths, ARunSeesOnlyItsOwnCountsAndTimes) {
  const GpuPathCounts start = gpu_path_counts();
  count_gpu_path(GpuPath::GemmFused);
  count_gpu_path(GpuPath::GemmFused, 4);
  count_gpu_path(GpuPath::GemmNaive);
  count_gpu_path_timed(GpuPath::CudnnPlanBuilds, 0.25);
  count_gpu_path_timed(GpuPath::CudnnPlanBuilds, 0.5);
  const GpuPathCounts d = gpu_path_counts() - start;
  EXPECT_EQ(d[GpuPath::GemmFused], 5);
  EXPECT_EQ(d[GpuPath::GemmNaive], 1);
  EXPECT_EQ(d[GpuPath::GemmPlain], 0);
  EXPECT_EQ(d[GpuPath::CudnnPlanBuilds], 2);
  EXPECT_NEAR(d.seconds_of(GpuPath::CudnnPlanBuilds), 0.75, 1e-9);
  EXPECT_EQ(d.seconds_of(GpuPath::GemmFused), 0.0);
  EXPECT_TRUE(d.deterministic());
  count_gpu_path(GpuPath::CudnnBackwardNondeterministic);
  EXPECT_FALSE((gpu_path_counts() - start).deterministic());
}

TEST(GpuPaths, CountsFromManyThreadsAreNotLost) {
  const GpuPathCounts start = gpu_path_counts();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 10000; ++i) count_gpu_path(GpuPath::GraphReplays);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ((gpu_path_counts() - start)[GpuPath::GraphReplays], 40000);
}

}  // namespace
}  // namespace ftune
