// Disentangled attention on CUDA, fp32 (the contract of ops/disentangled_attention.h): the fused
// path of ops/disentangled_fused.h, whose blocks (ops/disentangled_tiles.h) run here as kernels
// of disentangled::kThreads threads, one block per (query or key tile, sequence x head), the
// phases separated by __syncthreads(); the per-head GEMMs run on cuBLASLt (cuda/gemm.h). Nothing
// (B, H, T, T) reaches global memory: the saved state is lse and O, the scratch the (B T, 2k)
// position products. Deterministic: fixed-order sums, no atomics. Counted in gpu_paths as
// disentangled_fused (one per forward or backward pass).
// (The first, unfused kernel set this replaced materialised P and dS; it lives on in
// bench/cuda_kernels_old.cu as the benchmark's "before".)
#include <cuda_runtime.h>

#include <string>

#include "core/gpu_paths.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/streams.cuh"
#include "ops/disentangled_fused.h"

namespace ftune::cuda {
namespace {

using disentangled::FusedKind;
using disentangled::FusedPtrs;

struct DeviceExec {
  static constexpr int kNT = disentangled::kThreads;
  template <class F>
  __host__ __device__ void phase(F&& f) {
#ifdef __CUDA_ARCH__
    f(static_cast<int>(threadIdx.x));
    __syncthreads();
#endif
  }
};

// Grid: x = sequence x head (b H + h), y = tile.
template <FusedKind kind>
__global__ void __launch_bounds__(disentangled::kThreads)
    fused_kernel(DisentangledArgs a, FusedPtrs t, int64_t tile) {
  extern __shared__ float sm[];
  resolve_micro(t.rng, t.row0);  // a captured graph's micro-batch place, read at replay
  DeviceExec ex;
  if constexpr (kind == FusedKind::Forward)
    disentangled::forward_block(ex, a, t, tile, tile, blockIdx.y, blockIdx.x, sm);
  else if constexpr (kind == FusedKind::Dq)
    disentangled::dq_block(ex, a, t, tile, tile, blockIdx.y, blockIdx.x, sm);
  else
    disentangled::dkv_block(ex, a, t, tile, tile, blockIdx.y, blockIdx.x, sm);
}

__global__ void index_kernel(DisentangledArgs a, int32_t* index) {
  const int64_t d = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (d < 2 * a.T - 1) index[d] = static_cast<int32_t>(deberta_relative_index(a.spec, d - (a.T - 1)));
}

struct CudaBackend {
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cuda::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void zero_rows(float* p, int64_t ld, int64_t cols, int64_t rows) {
    if (rows <= 0 || cols <= 0) return;
    FTUNE_CUDA_CHECK(cudaMemset2DAsync(p, ld * sizeof(float), 0, cols * sizeof(float), rows,
                                       compute_stream()));
  }
  void blocks(FusedKind kind, const DisentangledArgs& a, const FusedPtrs& t, int64_t tile,
              int64_t bh, int64_t tiles) {
    if (bh > 0x7fffffff || tiles > 65535)
      throw ShapeError("disentangled_attention (CUDA): " + std::to_string(bh) +
                       " sequence-heads x " + std::to_string(tiles) + " tiles exceed the grid");
    const dim3 grid(static_cast<unsigned>(bh), static_cast<unsigned>(tiles));
    const size_t shared =
        sizeof(float) * disentangled::fused_shared_floats(kind, tile, tile, a.spec.head_dim);
    switch (kind) {
      case FusedKind::Forward:
        fused_kernel<FusedKind::Forward>
            <<<grid, disentangled::kThreads, shared, compute_stream()>>>(a, t, tile);
        break;
      case FusedKind::Dq:
        fused_kernel<FusedKind::Dq>
            <<<grid, disentangled::kThreads, shared, compute_stream()>>>(a, t, tile);
        break;
      case FusedKind::Dkv:
        fused_kernel<FusedKind::Dkv>
            <<<grid, disentangled::kThreads, shared, compute_stream()>>>(a, t, tile);
        break;
    }
    FTUNE_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace

void disentangled_relative_index(const DisentangledArgs& a, int32_t* index) {
  constexpr unsigned threads = 128;
  const unsigned blocks = static_cast<unsigned>((2 * a.T - 1 + threads - 1) / threads);
  index_kernel<<<blocks, threads, 0, compute_stream()>>>(a, index);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void disentangled_attention_forward(const DisentangledArgs& a, float* out, float* saved,
                                    const float* q, const float* k, const float* v,
                                    const float* pk, const float* pq, float* workspace) {
  CudaBackend be;
  disentangled::fused_forward(be, a, out, saved, q, k, v, pk, pq, workspace);
  count_gpu_path(GpuPath::DisentangledFused);
}

void disentangled_attention_backward(const DisentangledArgs& a, float* dq, float* dk, float* dv,
                                     float* dpk, float* dpq, const float* dout, const float* q,
                                     const float* k, const float* v, const float* pk,
                                     const float* pq, const float* saved, float* workspace) {
  CudaBackend be;
  disentangled::fused_backward(be, a, dq, dk, dv, dpk, dpq, dout, q, k, v, pk, pq, saved,
                               workspace);
  count_gpu_path(GpuPath::DisentangledFused);
}

}  // namespace ftune::cuda
