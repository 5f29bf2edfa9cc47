// summary.json "gpu_paths" (see gpu_paths_report.h).
#include "train/gpu_paths_report.h"

namespace ftune {

nlohmann::json gpu_paths_json(const GpuPathCounts& c) {
  using P = GpuPath;
  return {
      {"gemm",
       {{"fused", c[P::GemmFused]},
        {"plain", c[P::GemmPlain]},
        {"unfused_epilogue", c[P::GemmUnfused]},
        {"naive", c[P::GemmNaive]}}},
      {"attention",
       {{"cudnn", c[P::AttentionCudnn]},
        {"ftune", c[P::AttentionFtune]},
        {"cudnn_refused", c[P::AttentionCudnnRefused]},
        {"packed_cudnn", c[P::AttentionPackedCudnn]},
        {"packed_ftune", c[P::AttentionPackedFtune]}}},
      {"disentangled_attention",
       {{"fused", c[P::DisentangledFused]}, {"fused16", c[P::DisentangledFused16]}}},
      {"cudnn_plans",
       {{"builds", c[P::CudnnPlanBuilds]},
        {"build_seconds", c.seconds_of(P::CudnnPlanBuilds)},
        {"refused_shapes", c[P::CudnnPlanRefusals]},
        {"nondeterministic_backward", c[P::CudnnBackwardNondeterministic]}}},
      {"cuda_graphs",
       {{"captures", c[P::GraphCaptures]},
        {"capture_seconds", c.seconds_of(P::GraphCaptures)},
        {"replays", c[P::GraphReplays]}}},
      {"deterministic", c.deterministic()},
      {"counted", "host calls: a replayed CUDA graph repeats the calls it captured uncounted"}};
}

}  // namespace ftune
