// The tanh part of the pooler on CUDA; mirrors ops/tanh_pooler_cpu.cc (the GEMM is the linear
// op's, ops/linear_cuda.cu).
//   forward:  x = tanh(x) in place
//   backward: dpre = dout * (1 - out^2)   (overwritten)
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/tanh_pooler.h"

namespace ftune::cuda {
namespace {

__global__ void tanh_inplace_kernel(float* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = tanhf(x[i]);
}

__global__ void tanh_backward_kernel(float* dpre, const float* dout, const float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dpre[i] = dout[i] * (1.0f - out[i] * out[i]);
}

}  // namespace

void tanh_inplace(float* x, int64_t n) {
  if (n == 0) return;
  tanh_inplace_kernel<<<grid_stride_blocks(n, 256), 256, 0, compute_stream()>>>(x, n);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void tanh_backward(float* dpre, const float* dout, const float* out, int64_t n) {
  if (n == 0) return;
  tanh_backward_kernel<<<grid_stride_blocks(n, 256), 256, 0, compute_stream()>>>(dpre, dout, out, n);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
