// GELU on CUDA: the same formula as the CPU (ops/gelu_math.h), fp32 math. V elements per thread
// with 128-bit accesses (cuda/vec.cuh: four floats, or eight bf16 / f16 values) when every pointer
// is 16-byte aligned, the last n % V elements one by one; one element per thread (V = 1) for
// misaligned views. Each element is computed by the same expression on either path: the same bits.
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "cuda/vec.cuh"
#include "ops/gelu.h"
#include "ops/gelu_math.h"

namespace ftune::cuda {
namespace {

template <int V, typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n, GeluForm form) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if constexpr (V > 1) {
    if (i + V <= n) {
      float x[V];
      load_vec<V>(inp + i, x);
#pragma unroll
      for (int j = 0; j < V; ++j) x[j] = gelu_value(x[j], form);
      store_vec<V>(out + i, x);
      return;
    }
  }
  for (int64_t j = i; j < n && j < i + V; ++j) store_f32(out + j, gelu_value(load_f32(inp + j), form));
}

template <int V, typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n,
                                     GeluForm form) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if constexpr (V > 1) {
    if (i + V <= n) {
      float x[V], dy[V];
      load_vec<V>(inp + i, x);
      load_vec<V>(dout + i, dy);
#pragma unroll
      for (int j = 0; j < V; ++j) x[j] = dy[j] * gelu_grad(x[j], form);
      store_vec<V>(dinp + i, x);
      return;
    }
  }
  for (int64_t j = i; j < n && j < i + V; ++j)
    store_f32(dinp + j, load_f32(dout + j) * gelu_grad(load_f32(inp + j), form));
}

template <typename T>
void forward(T* out, const T* inp, int64_t n, GeluForm form) {
  constexpr int V = vec_width<T>();
  if (all_aligned16(out, inp))
    gelu_forward_kernel<V><<<grid_for((n + V - 1) / V, 256), 256, 0, compute_stream()>>>(
        out, inp, n, form);
  else
    gelu_forward_kernel<1><<<grid_for(n, 256), 256, 0, compute_stream()>>>(out, inp, n, form);
  FTUNE_CUDA_CHECK_LAUNCH();
}

template <typename T>
void backward(T* dinp, const T* inp, const T* dout, int64_t n, GeluForm form) {
  constexpr int V = vec_width<T>();
  if (all_aligned16(dinp, inp, dout))
    gelu_backward_kernel<V><<<grid_for((n + V - 1) / V, 256), 256, 0, compute_stream()>>>(
        dinp, inp, dout, n, form);
  else
    gelu_backward_kernel<1><<<grid_for(n, 256), 256, 0, compute_stream()>>>(dinp, inp, dout, n,
                                                                             form);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gelu_forward_16(void* out, const void* inp, DType dtype, int64_t n, GeluForm form) {
  if (n == 0) return;
  with_float_type(dtype, out, [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    forward(o, static_cast<const T*>(inp), n, form);
  });
}

void gelu_backward_16(void* dinp, const void* inp, const void* dout, DType dtype, int64_t n,
                      GeluForm form) {
  if (n == 0) return;
  with_float_type(dtype, dinp, [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    backward(d, static_cast<const T*>(inp), static_cast<const T*>(dout), n, form);
  });
}

void gelu_forward(float* out, const float* inp, int64_t n, GeluForm form) {
  if (n == 0) return;
  forward(out, inp, n, form);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, GeluForm form) {
  if (n == 0) return;
  backward(dinp, inp, dout, n, form);
}

}  // namespace ftune::cuda
