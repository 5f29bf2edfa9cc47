// Process-wide GPU path counters (see gpu_paths.h).
#include "core/gpu_paths.h"

#include <atomic>

namespace ftune {
namespace {

constexpr size_t kPaths = static_cast<size_t>(GpuPath::kCount);
std::array<std::atomic<int64_t>, kPaths> g_count{};
// Seconds in nanoseconds (an atomic integer; double atomics have no fetch_add before C++20
// everywhere we build).
std::array<std::atomic<int64_t>, kPaths> g_nanos{};

}  // namespace

const char* gpu_path_name(GpuPath path) {
  switch (path) {
    case GpuPath::GemmFused: return "gemm_fused";
    case GpuPath::GemmPlain: return "gemm_plain";
    case GpuPath::GemmUnfused: return "gemm_unfused_epilogue";
    case GpuPath::GemmNaive: return "gemm_naive";
    case GpuPath::AttentionCudnn: return "attention_cudnn";
    case GpuPath::AttentionFtune: return "attention_ftune";
    case GpuPath::AttentionCudnnRefused: return "attention_cudnn_refused";
    case GpuPath::AttentionPackedCudnn: return "attention_packed_cudnn";
    case GpuPath::AttentionPackedFtune: return "attention_packed_ftune";
    case GpuPath::DisentangledFused: return "disentangled_attention_fused";
    case GpuPath::DisentangledFused16: return "disentangled_attention_fused16";
    case GpuPath::CudnnPlanBuilds: return "cudnn_plan_builds";
    case GpuPath::CudnnPlanRefusals: return "cudnn_plan_refusals";
    case GpuPath::CudnnBackwardNondeterministic: return "cudnn_backward_nondeterministic";
    case GpuPath::GraphCaptures: return "graph_captures";
    case GpuPath::GraphReplays: return "graph_replays";
    case GpuPath::kCount: break;
  }
  return "unknown";
}

GpuPathCounts GpuPathCounts::operator-(const GpuPathCounts& earlier) const {
  GpuPathCounts d;
  for (size_t i = 0; i < kPaths; ++i) {
    d.count[i] = count[i] - earlier.count[i];
    d.seconds[i] = seconds[i] - earlier.seconds[i];
  }
  return d;
}

void count_gpu_path(GpuPath path, int64_t n) {
  g_count[static_cast<size_t>(path)].fetch_add(n, std::memory_order_relaxed);
}

void count_gpu_path_timed(GpuPath path, double seconds) {
  count_gpu_path(path);
  g_nanos[static_cast<size_t>(path)].fetch_add(static_cast<int64_t>(seconds * 1e9),
                                               std::memory_order_relaxed);
}

GpuPathCounts gpu_path_counts() {
  GpuPathCounts c;
  for (size_t i = 0; i < kPaths; ++i) {
    c.count[i] = g_count[i].load(std::memory_order_relaxed);
    c.seconds[i] = static_cast<double>(g_nanos[i].load(std::memory_order_relaxed)) * 1e-9;
  }
  return c;
}

}  // namespace ftune
