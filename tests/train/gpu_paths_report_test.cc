// summary.json "gpu_paths" (train/gpu_paths_report.h): every counter lands under its group, with
// the times of plan builds and graph captures, and "deterministic" follows cuDNN's backward.
#include "train/gpu_paths_report.h"

#include <gtest/gtest.h>

namespace ftune {
namespace {

GpuPathCounts counts() {
  GpuPathCounts c;
  for (int i = 0; i < static_cast<int>(GpuPath::kCount); ++i) c.count[i] = 10 + i;
  c.seconds[static_cast<size_t>(GpuPath::CudnnPlanBuilds)] = 1.5;
  c.seconds[static_cast<size_t>(GpuPath::GraphCaptures)] = 0.25;
  return c;
}

TEST(GpuPathsReport, EveryCounterHasItsPlace) {
  const GpuPathCounts c = counts();
  const nlohmann::json j = gpu_paths_json(c);
  EXPECT_EQ(j["gemm"]["fused"], c[GpuPath::GemmFused]);
  EXPECT_EQ(j["gemm"]["plain"], c[GpuPath::GemmPlain]);
  EXPECT_EQ(j["gemm"]["unfused_epilogue"], c[GpuPath::GemmUnfused]);
  EXPECT_EQ(j["gemm"]["naive"], c[GpuPath::GemmNaive]);
  EXPECT_EQ(j["attention"]["cudnn"], c[GpuPath::AttentionCudnn]);
  EXPECT_EQ(j["attention"]["ftune"], c[GpuPath::AttentionFtune]);
  EXPECT_EQ(j["attention"]["cudnn_refused"], c[GpuPath::AttentionCudnnRefused]);
  EXPECT_EQ(j["attention"]["packed_cudnn"], c[GpuPath::AttentionPackedCudnn]);
  EXPECT_EQ(j["attention"]["packed_ftune"], c[GpuPath::AttentionPackedFtune]);
  EXPECT_EQ(j["disentangled_attention"]["fused"], c[GpuPath::DisentangledFused]);
  EXPECT_EQ(j["disentangled_attention"]["fused16"], c[GpuPath::DisentangledFused16]);
  EXPECT_EQ(j["cudnn_plans"]["builds"], c[GpuPath::CudnnPlanBuilds]);
  EXPECT_EQ(j["cudnn_plans"]["build_seconds"], 1.5);
  EXPECT_EQ(j["cudnn_plans"]["refused_shapes"], c[GpuPath::CudnnPlanRefusals]);
  EXPECT_EQ(j["cudnn_plans"]["nondeterministic_backward"],
            c[GpuPath::CudnnBackwardNondeterministic]);
  EXPECT_EQ(j["cuda_graphs"]["captures"], c[GpuPath::GraphCaptures]);
  EXPECT_EQ(j["cuda_graphs"]["capture_seconds"], 0.25);
  EXPECT_EQ(j["cuda_graphs"]["replays"], c[GpuPath::GraphReplays]);
  EXPECT_EQ(j["deterministic"], false);  // a non-deterministic backward was counted
  // Every path appears once: the groups hold kCount numbers in all.
  int numbers = 0;
  for (const auto& [group, v] : j.items())
    if (v.is_object())
      for (const auto& [k, x] : v.items())
        if (x.is_number_integer()) ++numbers;
  EXPECT_EQ(numbers, static_cast<int>(GpuPath::kCount));
  EXPECT_EQ(gpu_paths_json(GpuPathCounts{})["deterministic"], true);
}

}  // namespace
}  // namespace ftune
