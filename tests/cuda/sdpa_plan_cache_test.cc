// The failure policy of cuDNN attention's plan cache (cuda/sdpa_plan_cache.h) with a scripted
// builder, on any machine: a refused build is remembered and never built again; an out-of-memory
// or other error during a build propagates and is not remembered (the next call builds again); a
// plan with a non-deterministic backward is counted; builds are counted and timed. And how
// cudnn_frontend's error codes are read.
#include "cuda/sdpa_plan_cache.h"

#include <gtest/gtest.h>

#include <string>

#include "core/gpu_paths.h"

namespace ftune::cuda {
namespace {

const SdpaPlanKey kKey{0, 32, 128, 12, 64, 0, 0.1f};

SdpaPlans plans(bool deterministic = true) {
  SdpaPlans p;
  p.graphs = std::make_shared<int>(7);
  p.forward_ws = 100;
  p.backward_ws = 200;
  p.deterministic = deterministic;
  if (!deterministic) p.nondeterministic_why = "GRAPH_NOT_SUPPORTED: no deterministic engine";
  return p;
}

TEST(SdpaBuildFailure, ReadsCudnnFrontendCodes) {
  EXPECT_EQ(classify_sdpa_build_failure("GRAPH_NOT_SUPPORTED", "sdpa: d > 128"),
            SdpaBuildFailure::NotSupported);
  EXPECT_EQ(classify_sdpa_build_failure("HEURISTIC_QUERY_FAILED", "no valid engine configs"),
            SdpaBuildFailure::NotSupported);
  EXPECT_EQ(classify_sdpa_build_failure("GRAPH_EXECUTION_PLAN_CREATION_FAILED", "no plan"),
            SdpaBuildFailure::NotSupported);
  EXPECT_EQ(classify_sdpa_build_failure(
                "CUDNN_BACKEND_API_FAILED",
                "cudnnBackendFinalize failed with code: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH"),
            SdpaBuildFailure::NotSupported);
  // Out of memory, whatever the code: never a refusal of the shape.
  EXPECT_EQ(classify_sdpa_build_failure("GRAPH_EXECUTION_PLAN_CREATION_FAILED",
                                        "CUDNN_STATUS_ALLOC_FAILED"),
            SdpaBuildFailure::OutOfMemory);
  EXPECT_EQ(classify_sdpa_build_failure("CUDA_API_FAILED",
                                        "cudaMalloc failed with cudaErrorMemoryAllocation"),
            SdpaBuildFailure::OutOfMemory);
  EXPECT_EQ(classify_sdpa_build_failure("CUDA_API_FAILED", "out of memory"),
            SdpaBuildFailure::OutOfMemory);
  // Everything else is an error to report, not a shape to avoid.
  for (const char* code : {"CUDA_API_FAILED", "INVALID_VALUE", "ATTRIBUTE_NOT_SET", "HANDLE_ERROR",
                           "INVALID_VARIANT_PACK", "CUDNN_BACKEND_API_FAILED"})
    EXPECT_EQ(classify_sdpa_build_failure(code, "CUDNN_STATUS_BAD_PARAM"), SdpaBuildFailure::Error)
        << code;
}

TEST(SdpaBuildFailure, ThrowsTheTypeThatSaysWhatHappened) {
  EXPECT_THROW(throw_sdpa_build_failure("forward", "GRAPH_NOT_SUPPORTED", "x"), SdpaNotSupported);
  EXPECT_THROW(throw_sdpa_build_failure("forward", "CUDA_API_FAILED", "out of memory"),
               OutOfMemoryError);
  try {
    throw_sdpa_build_failure("building the forward graph", "INVALID_VALUE", "stride 0");
    FAIL();
  } catch (const SdpaNotSupported&) {
    FAIL() << "an argument error is not a refusal";
  } catch (const DeviceError& e) {
    EXPECT_STREQ(e.what(),
                 "cuDNN attention: building the forward graph: INVALID_VALUE: stride 0");
  }
}

TEST(SdpaPlanCache, BuildsOnceAndCountsTheBuild) {
  const GpuPathCounts before = gpu_path_counts();
  SdpaPlanCache cache;
  int calls = 0;
  const auto build = [&] {
    ++calls;
    return plans();
  };
  const auto a = cache.get(kKey, build);
  const auto b = cache.get(kKey, build);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->backward_ws, 200);
  SdpaPlanKey other = kKey;
  other.T = 64;
  cache.get(other, build);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.builds(), 2);
  const GpuPathCounts d = gpu_path_counts() - before;
  EXPECT_EQ(d[GpuPath::CudnnPlanBuilds], 2);
  EXPECT_GE(d.seconds_of(GpuPath::CudnnPlanBuilds), 0.0);
  EXPECT_EQ(d[GpuPath::CudnnPlanRefusals], 0);
  EXPECT_TRUE(d.deterministic());
}

TEST(SdpaPlanCache, RemembersARefusalAndNeverBuildsTheShapeAgain) {
  const GpuPathCounts before = gpu_path_counts();
  SdpaPlanCache cache;
  int calls = 0;
  const auto refuse = [&]() -> SdpaPlans {
    ++calls;
    throw SdpaNotSupported("cuDNN attention: building the forward graph: GRAPH_NOT_SUPPORTED: d");
  };
  EXPECT_THROW(cache.get(kKey, refuse), SdpaNotSupported);
  try {
    cache.get(kKey, [&] {
      ++calls;
      return plans();
    });
    FAIL() << "a refused shape was built again";
  } catch (const SdpaNotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("GRAPH_NOT_SUPPORTED"), std::string::npos);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache.refused(), 1);
  EXPECT_EQ((gpu_path_counts() - before)[GpuPath::CudnnPlanRefusals], 1);
}

TEST(SdpaPlanCache, AnOutOfMemoryDuringABuildIsNotARefusal) {
  SdpaPlanCache cache;
  int calls = 0;
  EXPECT_THROW(cache.get(kKey,
                         [&]() -> SdpaPlans {
                           ++calls;
                           throw_sdpa_build_failure("building the backward graph",
                                                    "CUDA_API_FAILED",
                                                    "cudaErrorMemoryAllocation");
                         }),
               OutOfMemoryError);
  EXPECT_EQ(cache.refused(), 0);
  // The next call builds again (memory was freed meanwhile) and gets the plans.
  const auto p = cache.get(kKey, [&] {
    ++calls;
    return plans();
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(p->forward_ws, 100);
}

TEST(SdpaPlanCache, AnErrorDuringABuildPropagatesAndIsNotRemembered) {
  SdpaPlanCache cache;
  int calls = 0;
  const auto fail = [&]() -> SdpaPlans {
    ++calls;
    throw DeviceError("cuDNN: cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED");
  };
  for (int i = 0; i < 2; ++i) {
    try {
      cache.get(kKey, fail);
      FAIL();
    } catch (const SdpaNotSupported&) {
      FAIL() << "an error became a refusal";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("cudnnCreate"), std::string::npos);
    }
  }
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.refused(), 0);
  EXPECT_EQ(cache.builds(), 0);
}

TEST(SdpaPlanCache, ANonDeterministicBackwardIsCounted) {
  const GpuPathCounts before = gpu_path_counts();
  SdpaPlanCache cache;
  const auto p = cache.get(kKey, [] { return plans(/*deterministic=*/false); });
  EXPECT_FALSE(p->deterministic);
  cache.get(kKey, [] { return plans(false); });  // cached: counted once
  const GpuPathCounts d = gpu_path_counts() - before;
  EXPECT_EQ(d[GpuPath::CudnnBackwardNondeterministic], 1);
  EXPECT_FALSE(d.deterministic());
}

}  // namespace
}  // namespace ftune::cuda
