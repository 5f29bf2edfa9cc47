// Residual add on CUDA: four elements per thread with 128-bit loads when all pointers are
// 16-byte aligned (arena buffers always are), one element per thread otherwise. The mixed-type add
// (a bf16 sublayer output plus the fp32 stream) moves eight elements per thread the same way
// (cuda/vec.cuh: one uint4 of bf16, two float4 of fp32). Either path adds each element alike.
#include <cstdint>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "cuda/vec.cuh"
#include "ops/residual.h"

namespace ftune::cuda {
namespace {

__global__ void residual_vec4_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i4 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i4 + 3 < n) {
    const float4 x = *reinterpret_cast<const float4*>(a + i4);
    const float4 y = *reinterpret_cast<const float4*>(b + i4);
    *reinterpret_cast<float4*>(out + i4) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  } else {
    for (int64_t i = i4; i < n; ++i) out[i] = a[i] + b[i];
  }
}

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

template <int V, typename O, typename A, typename B>
__global__ void residual_mixed_kernel(O* out, const A* a, const B* b, int64_t n) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if constexpr (V > 1) {
    if (i + V <= n) {
      float x[V], y[V];
      load_vec<V>(a + i, x);
      load_vec<V>(b + i, y);
#pragma unroll
      for (int j = 0; j < V; ++j) x[j] += y[j];
      store_vec<V>(out + i, x);
      return;
    }
  }
  for (int64_t j = i; j < n && j < i + V; ++j) store_f32(out + j, load_f32(a + j) + load_f32(b + j));
}

}  // namespace

void residual_forward_mixed(void* out, DType out_type, const void* a, DType a_type, const void* b,
                            DType b_type, int64_t n) {
  if (n == 0) return;
  with_float_type(out_type, out, [&](auto* o) {
    with_float_type(a_type, const_cast<void*>(a), [&](auto* pa) {
      with_float_type(b_type, const_cast<void*>(b), [&](auto* pb) {
        constexpr int V = vec_width<std::remove_pointer_t<decltype(o)>,
                                    std::remove_pointer_t<decltype(pa)>,
                                    std::remove_pointer_t<decltype(pb)>>();
        if (all_aligned16(o, pa, pb))
          residual_mixed_kernel<V><<<grid_for((n + V - 1) / V, 256), 256, 0, compute_stream()>>>(
              o, pa, pb, n);
        else
          residual_mixed_kernel<1><<<grid_for(n, 256), 256, 0, compute_stream()>>>(o, pa, pb, n);
      });
    });
  });
  FTUNE_CUDA_CHECK_LAUNCH();
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  if (aligned16(out) && aligned16(a) && aligned16(b))
    residual_vec4_kernel<<<grid_for((n + 3) / 4, 256), 256, 0, compute_stream()>>>(out, a, b, n);
  else
    residual_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(out, a, b, n);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
