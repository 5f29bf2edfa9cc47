// First-token selection on CUDA; mirrors ops/first_token_cpu.cc.
//   forward:  out (B, C) = hidden (B, T, C)[:, 0, :]          (one thread per output element)
//   backward: dhidden (B, T, C) = dout at t = 0, zero elsewhere (overwritten; one thread per
//             element of dhidden, so every element is written)
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/first_token.h"

namespace ftune::cuda {
namespace {

__global__ void first_token_forward_kernel(float* out, const float* hidden, int64_t B, int64_t T,
                                           int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < B * C;
       i += stride) {
    const int64_t b = i / C, c = i % C;
    out[i] = hidden[b * T * C + c];
  }
}

__global__ void first_token_backward_kernel(float* dhidden, const float* dout, int64_t B, int64_t T,
                                            int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < B * T * C;
       i += stride) {
    const int64_t b = i / (T * C), t = (i / C) % T, c = i % C;
    dhidden[i] = t == 0 ? dout[b * C + c] : 0.0f;
  }
}

}  // namespace

void first_token_forward(float* out, const float* hidden, int64_t B, int64_t T, int64_t C) {
  if (B * C == 0) return;
  first_token_forward_kernel<<<grid_stride_blocks(B * C, 256), 256, 0, compute_stream()>>>(out, hidden, B, T, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void first_token_backward(float* dhidden, const float* dout, int64_t B, int64_t T, int64_t C) {
  if (B * T * C == 0) return;
  first_token_backward_kernel<<<grid_stride_blocks(B * T * C, 256), 256, 0, compute_stream()>>>(dhidden, dout, B, T, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
