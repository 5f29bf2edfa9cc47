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

namespace ftune::cuda {

// Blocks of `threads` threads covering n elements.
inline unsigned grid_for(int64_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace ftune::cuda
