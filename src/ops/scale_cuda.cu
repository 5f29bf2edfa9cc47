// Scaling in place on CUDA: x *= alpha, grid-stride (see scale.h).
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/scale.h"

namespace ftune::cuda {
namespace {

__global__ void scale_kernel(float* x, int64_t n, float alpha) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] *= alpha;
}

}  // namespace

void scale_inplace(float* x, int64_t n, float alpha) {
  if (n == 0) return;
  scale_kernel<<<grid_stride_blocks(n, 256), 256, 0, compute_stream()>>>(x, n, alpha);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
