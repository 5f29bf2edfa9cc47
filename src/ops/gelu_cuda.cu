// GELU on CUDA: one thread per element, the same formula as the CPU (ops/gelu_math.h).
#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include <type_traits>

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

template <typename T>
__global__ void gelu_forward_16_kernel(T* out, const T* inp, int64_t n, GeluForm form) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store_f32(out + i, gelu_value(load_f32(inp + i), form));
}

template <typename T>
__global__ void gelu_backward_16_kernel(T* dinp, const T* inp, const T* dout, int64_t n,
                                        GeluForm form) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store_f32(dinp + i, load_f32(dout + i) * gelu_grad(load_f32(inp + i), form));
}

}  // namespace

void gelu_forward_16(void* out, const void* inp, DType dtype, int64_t n, GeluForm form) {
  if (n == 0) return;
  with_float_type(dtype, out, [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    gelu_forward_16_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(
        o, static_cast<const T*>(inp), n, form);
  });
  FTUNE_CUDA_CHECK_LAUNCH();
}

void gelu_backward_16(void* dinp, const void* inp, const void* dout, DType dtype, int64_t n,
                      GeluForm form) {
  if (n == 0) return;
  with_float_type(dtype, dinp, [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    gelu_backward_16_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(
        d, static_cast<const T*>(inp), static_cast<const T*>(dout), n, form);
  });
  FTUNE_CUDA_CHECK_LAUNCH();
}

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
