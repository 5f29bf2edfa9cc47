// Which GPU code path ran: process-wide counters that the CUDA backend bumps at each decision, so
// that a slow fallback shows up in numbers rather than only in a log line (summary.json
// "gpu_paths", the GPU kit, and the tests that assert the fast path ran where the device has it).
//
// What is counted is host-side decisions: each GEMM call, attention pass, cuDNN plan build and
// CUDA graph capture or launch made by the host. A replayed CUDA graph repeats the calls it
// captured without running their host code, so they are counted once, at capture; the graph
// launches are counted separately (GraphReplays). A run reports the difference between the counts
// at its end and at its start (gpu_path_counts() - snapshot), so runs in one process (HPO trials)
// do not see each other's counts.
//
// Plain C++ (no CUDA): the counters are atomics, cheap enough for the per-GEMM hot path, and the
// CPU build has them too (all zero), so the summary's shape does not depend on the build.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ftune {

enum class GpuPath : int {
  // cuBLASLt GEMMs (cuda/gemm.h):
  GemmFused,    // cuBLASLt ran the call with its epilogue (bias, bias gradient) fused
  GemmPlain,    // cuBLASLt ran a call that asks for no epilogue
  GemmUnfused,  // the epilogue ran as separate kernels after cuBLASLt's plain GEMM
  GemmNaive,    // ftune's one-thread-per-output kernel (cuBLASLt offered or ran no algorithm)
  // Attention passes (forward or backward, ops/attention.h):
  AttentionCudnn,         // run by cuDNN's flash attention
  AttentionFtune,         // run by ftune's kernel
  AttentionCudnnRefused,  // of AttentionFtune: cuDNN was asked for and refused the shape
  AttentionPackedCudnn,   // of AttentionCudnn: packed (varlen) rows, cuDNN's ragged layout
  AttentionPackedFtune,   // of AttentionFtune: packed (varlen) rows, ftune's varlen kernel
  // Disentangled attention passes (forward or backward, ops/disentangled_attention.h):
  DisentangledFused,    // fp32 storage (or a 16-bit head size past the 16-bit tiles: staged)
  DisentangledFused16,  // 16-bit storage on the tensor-core tiles (ops/disentangled_tiles16.h)
  // cuDNN attention plans (cuda/cudnn_attention.h), counted once per shape at build time:
  CudnnPlanBuilds,          // forward + backward graphs built (seconds: their build time)
  CudnnPlanRefusals,        // shapes cuDNN answered "not supported" for
  CudnnBackwardNondeterministic,  // plans whose backward is cuDNN's non-deterministic one
  // CUDA graphs of the training step (train/step_graphs.h):
  GraphCaptures,  // captured and instantiated (seconds: capture + instantiation time)
  GraphReplays,   // launches of an existing graph
  kCount
};

// "gemm_fused", "attention_cudnn", ... (the summary's keys).
const char* gpu_path_name(GpuPath path);

struct GpuPathCounts {
  std::array<int64_t, static_cast<size_t>(GpuPath::kCount)> count{};
  std::array<double, static_cast<size_t>(GpuPath::kCount)> seconds{};

  int64_t operator[](GpuPath p) const { return count[static_cast<size_t>(p)]; }
  double seconds_of(GpuPath p) const { return seconds[static_cast<size_t>(p)]; }
  GpuPathCounts operator-(const GpuPathCounts& earlier) const;
  // True when nothing that draws non-deterministic bits ran (today: cuDNN's default backward).
  bool deterministic() const { return (*this)[GpuPath::CudnnBackwardNondeterministic] == 0; }
};

void count_gpu_path(GpuPath path, int64_t n = 1);
// Adds to the path's count and its seconds (a plan build, a graph capture).
void count_gpu_path_timed(GpuPath path, double seconds);
GpuPathCounts gpu_path_counts();

}  // namespace ftune
