// cuBLASLt's entry points that ftune calls (cuda/gemm.cu), forwarded to the library loaded on
// first use (cuda/lazy_library.h). A missing library or symbol fails every call with
// CUBLAS_STATUS_NOT_INITIALIZED, and cublasLtGetStatusString then says what could not be loaded,
// so FTUNE_CUBLAS_CHECK's error names it.
#ifdef FTUNE_WITH_CUDA

#include <cublasLt.h>
#include <fmt/format.h>

#include "cuda/lazy_library.h"

namespace ftune::cuda {

LazyLibrary& cublaslt_runtime() {
  static LazyLibrary lib(fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR),
                         "FTUNE_CUBLASLT_LIBRARY");
  return lib;
}

}  // namespace ftune::cuda

namespace {

constexpr cublasStatus_t kNotLoaded = CUBLAS_STATUS_NOT_INITIALIZED;

const char* not_loaded_text() {
  static const std::string text =
      ftune::cuda::cublaslt_runtime().load_error().value_or("cuBLASLt lacks an entry point");
  return text.c_str();
}

}  // namespace

#define FTUNE_LT(ret, name, params, args, fail) \
  FTUNE_LAZY_FORWARD(ftune::cuda::cublaslt_runtime(), ret, name, params, args, fail)

extern "C" {

FTUNE_LT(size_t, cublasLtGetVersion, (void), (), 0)
FTUNE_LT(const char*, cublasLtGetStatusName, (cublasStatus_t status), (status), not_loaded_text())
FTUNE_LT(const char*, cublasLtGetStatusString, (cublasStatus_t status), (status),
         not_loaded_text())
FTUNE_LT(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatrixLayoutCreate,
         (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,
          int64_t ld),
         (layout, type, rows, cols, ld), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout),
         kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),
         (pref), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref),
         (pref), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
         (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
          const void* buf, size_t size),
         (pref, attr, buf, size), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulDescCreate,
         (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
         (desc, compute, scale), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc),
         kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulDescSetAttribute,
         (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
          size_t size),
         (desc, attr, buf, size), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
         (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
          cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
          cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
          int* returned),
         (handle, op, a, b, c, d, pref, requested, results, returned), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmulAlgoCheck,
         (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
          cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
          const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result),
         (handle, op, a, b, c, d, algo, result), kNotLoaded)
FTUNE_LT(cublasStatus_t, cublasLtMatmul,
         (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
          cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
          const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
          const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_size,
          cudaStream_t stream),
         (handle, desc, alpha, A, a, B, b, beta, C, c, D, d, algo, workspace, workspace_size,
          stream),
         kNotLoaded)

}  // extern "C"

#endif  // FTUNE_WITH_CUDA
