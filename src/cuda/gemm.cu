// Row-major f32 GEMM through cuBLASLt (see gemm.h); mirrors ops/primitives_cpu.cc's gemm().
// cuBLASLt is column-major: a row-major (M, N) matrix with leading dimension ld is the
// column-major (N, M) matrix with the same ld, so row-major C = op(A) op(B) is computed as
// column-major C^T = op(B)^T op(A)^T, i.e. cuBLASLt's (m, n, k) = (N, M, K) with A and B swapped.
// A row-major bias over the N columns is then a bias over the rows of cuBLASLt's D, which is what
// CUBLASLT_EPILOGUE_BIAS adds.
//
// Fallbacks, each one correct for every shape: a bias pointer that is not 16-byte aligned (the
// epilogue is known to need that; flat parameter buffers are only 4-byte aligned) or a bias the
// heuristic cannot fuse is added by a small kernel after the GEMM; a problem cuBLASLt offers no
// algorithm for (or K == 0) runs a plain one-thread-per-output kernel.
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/memory.h"
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/gemm.h"

namespace ftune::cuda {
namespace {

std::atomic<bool> g_tf32{false};

constexpr int kMaxDevices = 64;
constexpr size_t kBiasAlignment = 16;

// Largest power of two (at most 256) dividing the address: what cuBLASLt may assume about it.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// Everything cuBLASLt's algorithm choice depends on: shape, transposes, leading dimensions, the
// alignment of A, B, C and of the bias (0 without one; the heuristic reads the bias pointer's
// alignment from the descriptor) and the math mode.
using AlgoKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t,
                           uint32_t, uint32_t, uint32_t, uint32_t, bool>;

struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

struct DeviceBlas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::mutex mu;  // guards cache
  std::map<AlgoKey, CachedAlgo> cache;
};

// Created once per device and kept for the life of the process (destroying a cuBLASLt handle at
// static destruction time, after the CUDA runtime may have shut down, is not safe).
DeviceBlas& device_blas(int device) {
  static std::mutex mu;
  static std::array<DeviceBlas*, kMaxDevices> all{};
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("gemm: CUDA device index " + std::to_string(device) + " out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (!all[device]) {
    auto blas = std::make_unique<DeviceBlas>();
    FTUNE_CUDA_CHECK(cudaSetDevice(device));
    FTUNE_CUBLAS_CHECK(cublasLtCreate(&blas->handle));
    blas->workspace = device_malloc(Device::cuda(device), kGemmWorkspaceBytes);
    all[device] = blas.release();
  }
  return *all[device];
}

DeviceBlas& current_blas() {
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  return device_blas(device);
}

// Owning wrappers so an exception between create and destroy leaks nothing.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc(cublasComputeType_t compute) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(int64_t rows, int64_t cols, int64_t ld) {
    FTUNE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { FTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)));
  }
};

// The plain fallback: C[i, j] = alpha * sum_k op(A)[i, k] op(B)[k, j] + beta * C[i, j] + bias[j],
// one thread per output element, C not read when beta == 0 (it may hold NaN poison).
__global__ void gemm_naive_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                  float alpha, const float* A, int64_t lda, const float* B,
                                  int64_t ldb, float beta, float* C, int64_t ldc,
                                  const float* bias) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= M * N) return;
  const int64_t i = idx / N, j = idx % N;
  float sum = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float a = trans_a ? A[k * lda + i] : A[i * lda + k];
    const float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
    sum += a * b;
  }
  float v = alpha * sum;
  if (beta != 0.0f) v += beta * C[i * ldc + j];
  if (bias) v += bias[j];
  C[i * ldc + j] = v;
}

// C[i, j] += bias[j] for the (M, N) row-major C.
__global__ void add_bias_rows_kernel(float* C, int64_t ldc, const float* bias, int64_t M,
                                     int64_t N) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < M * N;
       idx += stride) {
    const int64_t i = idx / N, j = idx % N;
    C[i * ldc + j] += bias[j];
  }
}

// One cuBLASLt matmul; returns false (having done nothing) when the heuristic offers no algorithm.
bool try_cublaslt(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, const float* bias) {
  DeviceBlas& blas = current_blas();
  const bool tf32 = g_tf32.load(std::memory_order_relaxed);
  // Column-major view: (m, n, k) = (N, M, K); cuBLASLt's A is our B, its B is our A.
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MatmulDesc desc(tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (bias) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  }
  // Stored (column-major) shapes: cuBLASLt's A is (N, K) or (K, N), its B (K, M) or (M, K).
  const Layout la(op_a == CUBLAS_OP_N ? N : K, op_a == CUBLAS_OP_N ? K : N, ldb);
  const Layout lb(op_b == CUBLAS_OP_N ? K : M, op_b == CUBLAS_OP_N ? M : K, lda);
  const Layout lc(N, M, ldc);

  const uint32_t align_a = alignment_of(B), align_b = alignment_of(A), align_c = alignment_of(C);
  const uint32_t align_bias = bias ? alignment_of(bias) : 0;
  const AlgoKey key{M,   N,       K,       trans_a, trans_b,    lda, ldb,
                    ldc, align_a, align_b, align_c, align_bias, tf32};
  CachedAlgo chosen;
  {
    std::lock_guard<std::mutex> lock(blas.mu);
    auto it = blas.cache.find(key);
    if (it != blas.cache.end()) {
      chosen = it->second;
    } else {
      Preference pref;
      pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
               static_cast<uint64_t>(kGemmWorkspaceBytes));
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c);
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
          blas.handle, desc.d, la.l, lb.l, lc.l, lc.l, pref.p, 1, &result, &returned);
      // NOT_SUPPORTED means "no algorithm for this problem": the caller falls back.
      if (st != CUBLAS_STATUS_NOT_SUPPORTED) FTUNE_CUBLAS_CHECK(st);
      chosen.found = st == CUBLAS_STATUS_SUCCESS && returned > 0;
      if (chosen.found) chosen.algo = result.algo;
      blas.cache.emplace(key, chosen);
    }
  }
  if (!chosen.found) return false;
  // C is both the input (beta) and the output D, as in cublasSgemm.
  FTUNE_CUBLAS_CHECK(cublasLtMatmul(blas.handle, desc.d, &alpha, B, la.l, A, lb.l, &beta, C, lc.l,
                                    C, lc.l, &chosen.algo, blas.workspace, kGemmWorkspaceBytes,
                                    compute_stream()));
  return true;
}

}  // namespace

void gemm_init(int device) {
  device_blas(device);
}

void set_gemm_tf32(bool enabled) {
  g_tf32.store(enabled, std::memory_order_relaxed);
}

bool gemm_tf32() {
  return g_tf32.load(std::memory_order_relaxed);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  if (M == 0 || N == 0) return;
  if (K > 0) {
    const bool fuse_bias =
        bias != nullptr && reinterpret_cast<uintptr_t>(bias) % kBiasAlignment == 0;
    if (fuse_bias &&
        try_cublaslt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias))
      return;
    if (try_cublaslt(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr)) {
      if (bias) {
        add_bias_rows_kernel<<<grid_stride_blocks(M * N, 256), 256, 0, compute_stream()>>>(C, ldc, bias, M, N);
        FTUNE_CUDA_CHECK_LAUNCH();
      }
      return;
    }
  }
  gemm_naive_kernel<<<grid_for(M * N, 256), 256, 0, compute_stream()>>>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb,
                                                   beta, C, ldc, bias);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
