// GELU on CUDA: one thread per element, the same formula as the CPU (ops/gelu_math.h).
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/gelu.h"
#include "ops/gelu_math.h"

namespace ftune::cuda {
namespace {

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n, GeluForm form) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gelu_value(inp[i], form);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n,
                                     GeluForm form) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = dout[i] * gelu_grad(inp[i], form);
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, GeluForm form) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(out, inp, n, form);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluForm form) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(dinp, inp, dout, n, form);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
