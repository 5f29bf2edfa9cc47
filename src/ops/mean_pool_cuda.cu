// Mean pooling on CUDA; mirrors ops/mean_pool_cpu.cc (the same sums in the same order: one thread
// per (row, channel) walks the row's tokens, so the bits equal the CPU's).
//   forward:  one thread per output element (b, c)
//   backward: one thread per (b, c), writing that channel of every token of row b (overwritten)
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/mean_pool.h"

namespace ftune::cuda {
namespace {

__device__ void row_span(const int32_t* mask, const int32_t* cu, int64_t b, int64_t T,
                         int64_t* first, int64_t* last, int64_t* count) {
  *first = cu ? cu[b] : b * T;
  *last = cu ? cu[b + 1] : (b + 1) * T;
  *count = cu ? *last - *first : 0;
  if (!cu)
    for (int64_t t = *first; t < *last; ++t) *count += mask[t] != 0;
}

__global__ void mean_pool_forward_kernel(float* out, const float* hidden, const int32_t* mask,
                                         const int32_t* cu, int64_t B, int64_t T, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < B * C;
       i += stride) {
    const int64_t b = i / C, c = i % C;
    int64_t first, last, count;
    row_span(mask, cu, b, T, &first, &last, &count);
    float s = 0.0f;
    for (int64_t t = first; t < last; ++t)
      if (cu || mask[t]) s = __fadd_rn(s, hidden[t * C + c]);
    out[i] = count > 0 ? __fdiv_rn(s, static_cast<float>(count)) : 0.0f;
  }
}

__global__ void mean_pool_backward_kernel(float* dhidden, const float* dout, const int32_t* mask,
                                          const int32_t* cu, int64_t B, int64_t T, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < B * C;
       i += stride) {
    const int64_t b = i / C, c = i % C;
    int64_t first, last, count;
    row_span(mask, cu, b, T, &first, &last, &count);
    const float g = __fdiv_rn(dout[i], static_cast<float>(count));
    for (int64_t t = first; t < last; ++t) dhidden[t * C + c] = (cu || mask[t]) ? g : 0.0f;
  }
}

}  // namespace

void mean_pool_forward(float* out, const float* hidden, const int32_t* mask, const int32_t* cu,
                       int64_t B, int64_t T, int64_t C) {
  if (B * C == 0) return;
  mean_pool_forward_kernel<<<grid_stride_blocks(B * C, 256), 256, 0, compute_stream()>>>(
      out, hidden, mask, cu, B, T, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void mean_pool_backward(float* dhidden, const float* dout, const int32_t* mask, const int32_t* cu,
                        int64_t B, int64_t T, int64_t C) {
  if (B * C == 0) return;
  mean_pool_backward_kernel<<<grid_stride_blocks(B * C, 256), 256, 0, compute_stream()>>>(
      dhidden, dout, mask, cu, B, T, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
