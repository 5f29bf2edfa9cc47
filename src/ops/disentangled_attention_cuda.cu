// Disentangled attention on CUDA (the contract of ops/disentangled_attention.h). fp32: the fused
// path of ops/disentangled_fused.h, whose blocks (ops/disentangled_tiles.h) run here as kernels
// of disentangled::kThreads threads, one block per (query or key tile, sequence x head), the
// phases separated by __syncthreads(); the per-head GEMMs run on cuBLASLt (cuda/gemm.h). 16-bit
// storage (bf16, f16): ops/disentangled_fused16.h with the blocks of ops/disentangled_tiles16.h,
// whose tile products (ex.mma) run on tensor cores through WMMA 16x16x16 fragments (fp32
// accumulators, operands from shared memory), and cuBLASLt GEMMs of 16-bit inputs with fp32
// accumulation. Nothing (B, H, T, T) reaches global memory: the saved state is lse and O, the
// scratch the (B T, 2k) position products. Deterministic: fixed-order sums, no atomics (a WMMA
// product's order is fixed by the hardware). Counted in gpu_paths as disentangled_fused and
// disentangled_fused16 (one per forward or backward pass).
// (The first, unfused kernel set this replaced materialised P and dS; it lives on in
// bench/cuda_kernels_old.cu as the benchmark's "before".)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <string>
#include <type_traits>

#include "core/gpu_paths.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/streams.cuh"
#include "ops/cast.h"
#include "ops/disentangled_fused.h"
#include "ops/disentangled_fused16.h"

namespace ftune::cuda {
namespace {

using disentangled::FusedKind;
using disentangled::FusedPtrs;
using disentangled::Fused16Ptrs;
using disentangled::MmaOperand;

template <class S>
struct WmmaType;
template <>
struct WmmaType<bf16_t> {
  using type = __nv_bfloat16;
};
template <>
struct WmmaType<f16_t> {
  using type = __half;
};

// C (M, N) [+]= A B on tensor cores: each warp takes 16 x 16 output tiles in turn, its fragment
// loaded from C (accumulate) or zero, then the K / 16 products in order, stored back to C.
template <class S, class LA, class LB>
__device__ void mma_tiles(float* C, int64_t ldc, const S* A, int64_t lda, const S* B, int64_t ldb,
                          int64_t M, int64_t N, int64_t K, bool accumulate) {
  namespace wmma = nvcuda::wmma;
  using W = typename WmmaType<S>::type;
  constexpr bool a_row = std::is_same_v<LA, wmma::row_major>;
  constexpr bool b_row = std::is_same_v<LB, wmma::row_major>;
  const int warp = static_cast<int>(threadIdx.x) / 32, warps = disentangled::kThreads / 32;
  const int64_t nt = N / 16;
  for (int64_t t = warp; t < (M / 16) * nt; t += warps) {
    const int64_t m0 = t / nt * 16, n0 = t % nt * 16;
    float* cp = C + m0 * ldc + n0;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    if (accumulate)
      wmma::load_matrix_sync(c, cp, static_cast<unsigned>(ldc), wmma::mem_row_major);
    else
      wmma::fill_fragment(c, 0.0f);
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, LA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, LB> fb;
      const W* ap = reinterpret_cast<const W*>(A) + (a_row ? m0 * lda + k0 : k0 * lda + m0);
      const W* bp = reinterpret_cast<const W*>(B) + (b_row ? k0 * ldb + n0 : n0 * ldb + k0);
      wmma::load_matrix_sync(fa, ap, static_cast<unsigned>(lda));
      wmma::load_matrix_sync(fb, bp, static_cast<unsigned>(ldb));
      wmma::mma_sync(c, fa, fb, c);
    }
    wmma::store_matrix_sync(cp, c, static_cast<unsigned>(ldc), wmma::mem_row_major);
  }
}

struct DeviceExec {
  static constexpr int kNT = disentangled::kThreads;
  template <class F>
  __host__ __device__ void phase(F&& f) {
#ifdef __CUDA_ARCH__
    f(static_cast<int>(threadIdx.x));
    __syncthreads();
#endif
  }
  // The warp-level tile product (ops/disentangled_tiles16.h), then __syncthreads().
  template <class S>
  __host__ __device__ void mma(float* C, int64_t ldc, MmaOperand<S> A, MmaOperand<S> B, int64_t M,
                               int64_t N, int64_t K, bool accumulate) {
#ifdef __CUDA_ARCH__
    namespace wmma = nvcuda::wmma;
    if (A.col && B.col)
      mma_tiles<S, wmma::col_major, wmma::col_major>(C, ldc, A.p, A.ld, B.p, B.ld, M, N, K,
                                                     accumulate);
    else if (A.col)
      mma_tiles<S, wmma::col_major, wmma::row_major>(C, ldc, A.p, A.ld, B.p, B.ld, M, N, K,
                                                     accumulate);
    else if (B.col)
      mma_tiles<S, wmma::row_major, wmma::col_major>(C, ldc, A.p, A.ld, B.p, B.ld, M, N, K,
                                                     accumulate);
    else
      mma_tiles<S, wmma::row_major, wmma::row_major>(C, ldc, A.p, A.ld, B.p, B.ld, M, N, K,
                                                     accumulate);
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

// The 16-bit blocks: grid as above; dynamic shared memory up to kMaxShared16Bytes (opted in).
template <FusedKind kind, class S>
__global__ void __launch_bounds__(disentangled::kThreads)
    fused16_kernel(DisentangledArgs a, Fused16Ptrs<S> t, int64_t tile) {
  extern __shared__ __align__(128) char sm16[];
  resolve_micro(t.base.rng, t.base.row0);
  DeviceExec ex;
  if constexpr (kind == FusedKind::Forward)
    disentangled::forward_block16(ex, a, t, tile, blockIdx.y, blockIdx.x, sm16);
  else if constexpr (kind == FusedKind::Dq)
    disentangled::dq_block16(ex, a, t, tile, blockIdx.y, blockIdx.x, sm16);
  else
    disentangled::dkv_block16(ex, a, t, tile, blockIdx.y, blockIdx.x, sm16);
}

template <FusedKind kind, class S>
void launch16(const DisentangledArgs& a, const Fused16Ptrs<S>& t, int64_t tile, dim3 grid) {
  // Past the default 48 KiB a kernel must opt in, once per process (per device: a process runs
  // one device's kernels here).
  static const cudaError_t opted = cudaFuncSetAttribute(
      fused16_kernel<kind, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(disentangled::kMaxShared16Bytes));
  FTUNE_CUDA_CHECK(opted);
  const size_t shared = static_cast<size_t>(
      disentangled::fused16_shared_bytes(kind, tile, a.spec.head_dim));
  fused16_kernel<kind, S><<<grid, disentangled::kThreads, shared, compute_stream()>>>(a, t, tile);
}

dim3 grid_of(int64_t bh, int64_t tiles) {
  if (bh > 0x7fffffff || tiles > 65535)
    throw ShapeError("disentangled_attention (CUDA): " + std::to_string(bh) +
                     " sequence-heads x " + std::to_string(tiles) + " tiles exceed the grid");
  return dim3(static_cast<unsigned>(bh), static_cast<unsigned>(tiles));
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
    const dim3 grid = grid_of(bh, tiles);
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
  // The 16-bit path's (ops/disentangled_fused16.h).
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
            DType at, int64_t lda, const void* B, DType bt, int64_t ldb, float beta, void* C,
            DType ct, int64_t ldc) {
    GemmArgs g;
    g.trans_a = ta, g.trans_b = tb, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
    g.A = A, g.a_type = at, g.lda = lda, g.B = B, g.b_type = bt, g.ldb = ldb;
    g.C = C, g.c_type = ct, g.ldc = ldc;
    cuda::gemm(g);
  }
  void zero(void* p, DType t, int64_t ld, int64_t cols, int64_t rows) {
    if (rows <= 0 || cols <= 0) return;
    const size_t es = dtype_size(t);
    FTUNE_CUDA_CHECK(cudaMemset2DAsync(p, ld * es, 0, cols * es, rows, compute_stream()));
  }
  void cast(void* dst, DType dt, int64_t ldd, const void* src, DType st, int64_t lds,
            int64_t rows, int64_t cols) {
    if (rows > 0 && cols > 0) cuda::cast_2d(dst, dt, ldd, src, st, lds, rows, cols);
  }
  template <class S>
  void blocks16(FusedKind kind, const DisentangledArgs& a, const Fused16Ptrs<S>& t, int64_t tile,
                int64_t bh, int64_t tiles) {
    const dim3 grid = grid_of(bh, tiles);
    switch (kind) {
      case FusedKind::Forward: launch16<FusedKind::Forward>(a, t, tile, grid); break;
      case FusedKind::Dq: launch16<FusedKind::Dq>(a, t, tile, grid); break;
      case FusedKind::Dkv: launch16<FusedKind::Dkv>(a, t, tile, grid); break;
    }
    FTUNE_CUDA_CHECK_LAUNCH();
  }
};

// f(bf16_t{}) or f(f16_t{}) for a 16-bit storage type.
template <class F>
void on_storage(DType storage, F&& f) {
  if (storage == DType::BF16)
    f(bf16_t{});
  else
    f(f16_t{});
}

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

void disentangled_attention_forward16(const DisentangledArgs& a, void* out, float* saved,
                                      const void* q, const void* k, const void* v, const void* pk,
                                      const void* pq, float* workspace) {
  CudaBackend be;
  on_storage(a.storage, [&](auto tag) {
    using S = decltype(tag);
    disentangled::fused16_forward<S>(be, a, static_cast<S*>(out), saved,
                                     static_cast<const S*>(q), static_cast<const S*>(k),
                                     static_cast<const S*>(v), pk, pq, workspace);
  });
  count_gpu_path(GpuPath::DisentangledFused16);
}

void disentangled_attention_backward16(const DisentangledArgs& a, void* dq, void* dk, void* dv,
                                       void* dpk, void* dpq, const void* dout, const void* q,
                                       const void* k, const void* v, const void* pk,
                                       const void* pq, const float* saved, float* workspace) {
  CudaBackend be;
  on_storage(a.storage, [&](auto tag) {
    using S = decltype(tag);
    disentangled::fused16_backward<S>(be, a, static_cast<S*>(dq), static_cast<S*>(dk),
                                      static_cast<S*>(dv), dpk, dpq, static_cast<const S*>(dout),
                                      static_cast<const S*>(q), static_cast<const S*>(k),
                                      static_cast<const S*>(v), pk, pq, saved, workspace);
  });
  count_gpu_path(GpuPath::DisentangledFused16);
}

}  // namespace ftune::cuda
