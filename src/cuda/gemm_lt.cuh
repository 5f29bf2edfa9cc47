// What gemm.cu (the cuBLASLt backend, gemm.h) and gemm_autotune.cu (the timed choice of
// algorithms) share: the per-device handle and workspace, owning wrappers of cuBLASLt's
// descriptors, and the plan of one call key. Included by those two files alone.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/gemm_path.h"
#include "cuda/streams.cuh"

namespace ftune::cuda::lt {

constexpr int kMaxDevices = 64;

inline std::string us_text(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f us", us);
  return buf;
}

inline cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: break;
  }
  throw DeviceError("gemm: no cuBLASLt type for " + std::string(dtype_name(t)));
}

inline cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::BgradOpA: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// What a cuBLASLt status means for the path policy (gemm_path.h).
inline LtResult lt_result(cublasStatus_t st, const char* step) {
  LtResult r;
  if (st == CUBLAS_STATUS_SUCCESS) return r;
  r.status = st == CUBLAS_STATUS_NOT_SUPPORTED ? LtStatus::NotSupported
             : st == CUBLAS_STATUS_INVALID_VALUE ? LtStatus::InvalidValue
                                                  : LtStatus::Failed;
  r.detail = std::string(step) + ": " + cublasLtGetStatusName(st);
  return r;
}

// The handle and workspace of a device: created once (under the mutex), then read without a lock.
struct DeviceBlas {
  int index = 0;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::string name;  // for the cache file's key
  int sm = 0;
};

// Created once per device and kept for the life of the process (gemm.cu).
DeviceBlas& device_blas(int device);

// Owning wrappers so an exception between create and destroy leaks nothing.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  explicit MatmulDesc(cublasComputeType_t compute) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(DType type, int64_t rows, int64_t cols, int64_t ld) {
    FTUNE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(type), static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { FTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    FTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)));
  }
};

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    FTUNE_CUDA_CHECK(cudaEventCreate(&start));
    FTUNE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// The cuBLASLt objects of one call key, built on its first call in a thread and kept: the
// descriptors, and the algorithm chosen for the key (or why there is none). Column-major terms:
// cuBLASLt's A is our B, its B our A, C = D.
struct LtPlan {
  MatmulDesc desc;
  Layout la, lb, lc;
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::string why;  // when !found: cuBLASLt's answer

  LtPlan(const GemmArgs& g, bool tf32)
      : desc(tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F),
        // Stored (column-major) shapes: cuBLASLt's A is (N, K) or (K, N), its B (K, M) or (M, K).
        la(g.b_type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb),
        lb(g.a_type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda),
        lc(g.c_type, g.N, g.M, g.ldc) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g.epilogue));
    if (g.epilogue == GemmEpilogue::Bias)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cuda_type(g.bias_type)));
    if (g.epilogue == GemmEpilogue::BgradOpA)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  }

  // The call's epilogue vector (cuBLASLt's heuristic also reads its alignment from here): set on
  // every call, the pointer changes while the key does not.
  void set_pointers(const GemmArgs& g) {
    if (g.epilogue == GemmEpilogue::Bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.epilogue == GemmEpilogue::BgradOpA)
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(g.bias_grad));
  }

  // D = alpha * op(A) op(B) + beta * C. The real call runs in place (C == D, as cublasSgemm);
  // the autotuner's timing runs may point both at a scratch copy of C (TuneTarget).
  cublasStatus_t run(const DeviceBlas& blas, const GemmArgs& g, const cublasLtMatmulAlgo_t& a,
                     const void* C, void* D) {
    return cublasLtMatmul(blas.handle, desc.d, &g.alpha, g.B, la.l, g.A, lb.l, &g.beta, C, lc.l,
                          D, lc.l, &a, blas.workspace, kGemmWorkspaceBytes, compute_stream());
  }
};

// The timed choice of algorithms (gemm_autotune.cu), process-wide under tune_mutex().
std::mutex& tune_mutex();
// The algorithm for a key seen for the first time in this thread (see gemm_autotune.cu); the
// caller holds tune_mutex().
LtResult choose_algo(const DeviceBlas& blas, LtPlan& p, const GemmArgs& g, const GemmCallKey& ck,
                     bool capturing);
// A key cuBLASLt refused to run after choosing it: the fallback runs from now on (caller holds
// tune_mutex()).
void remember_refusal(const GemmCallKey& key, const std::string& why);
// Bumped when the choices are forgotten (set_gemm_autotune): threads drop their plans.
uint64_t plan_generation();

}  // namespace ftune::cuda::lt
