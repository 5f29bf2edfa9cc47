// Error checks for CUDA runtime calls: a failure throws DeviceError with file:line, the call and
// the runtime's own error string. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define FTUNE_CUDA_CHECK(call)                                                           \
  do {                                                                                   \
    const cudaError_t ftune_err_ = (call);                                               \
    if (ftune_err_ != cudaSuccess)                                                       \
      ::ftune::throw_cuda_error(__FILE__, __LINE__, #call, cudaGetErrorName(ftune_err_), \
                                cudaGetErrorString(ftune_err_));                         \
  } while (0)

// Checks the last kernel launch (launch configuration errors surface here, not at sync).
#define FTUNE_CUDA_CHECK_LAUNCH() FTUNE_CUDA_CHECK(cudaGetLastError())

// The same for cuBLAS / cuBLASLt calls (cublasStatus_t), with the library's status name and text.
// Needs <cublasLt.h> included before use.
#define FTUNE_CUBLAS_CHECK(call)                                                             \
  do {                                                                                       \
    const cublasStatus_t ftune_st_ = (call);                                                 \
    if (ftune_st_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::ftune::throw_cuda_error(__FILE__, __LINE__, #call, cublasLtGetStatusName(ftune_st_), \
                                cublasLtGetStatusString(ftune_st_));                         \
  } while (0)

namespace ftune::cuda {

// Blocks of `threads` threads covering n elements.
inline unsigned grid_for(int64_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than needed.
inline unsigned grid_stride_blocks(int64_t n, unsigned threads) {
  const int64_t want = (n + threads - 1) / threads;
  return static_cast<unsigned>(want < 1 ? 1 : (want > 4096 ? 4096 : want));
}

}  // namespace ftune::cuda
