// Cast on CUDA: fp32 in registers, rounded once on the store. V elements per thread with 128-bit
// accesses (cuda/vec.cuh) when both pointers are 16-byte aligned, the last n % V elements one by
// one; one element per thread (V = 1) for misaligned views. Every element converts the same way on
// either path: the same bits.
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "cuda/vec.cuh"
#include "ops/cast.h"

namespace ftune::cuda {
namespace {

template <int V, typename To, typename From>
__global__ void cast_kernel(To* out, const From* inp, int64_t n) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if constexpr (V > 1) {
    if (i + V <= n) {
      float v[V];
      load_vec<V>(inp + i, v);
      store_vec<V>(out + i, v);
      return;
    }
  }
  for (int64_t j = i; j < n && j < i + V; ++j) store_f32(out + j, load_f32(inp + j));
}

template <typename To, typename From>
__global__ void cast_2d_kernel(To* out, int64_t ldo, const From* inp, int64_t ldi, int64_t rows,
                               int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  store_f32(out + r * ldo + c, load_f32(inp + r * ldi + c));
}

}  // namespace

void cast_2d(void* out, DType out_type, int64_t ldo, const void* inp, DType inp_type, int64_t ldi,
             int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  with_float_type(out_type, out, [&](auto* o) {
    with_float_type(inp_type, const_cast<void*>(inp), [&](auto* in) {
      cast_2d_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(o, ldo, in, ldi, rows, cols);
      FTUNE_CUDA_CHECK_LAUNCH();
    });
  });
}

void cast(void* out, DType out_type, const void* inp, DType inp_type, int64_t n) {
  if (n == 0) return;
  with_float_type(out_type, out, [&](auto* o) {
    with_float_type(inp_type, const_cast<void*>(inp), [&](auto* in) {
      constexpr int V = vec_width<std::remove_pointer_t<decltype(o)>,
                                  std::remove_pointer_t<decltype(in)>>();
      if (all_aligned16(o, in))
        cast_kernel<V><<<grid_for((n + V - 1) / V, 256), 256, 0, compute_stream()>>>(o, in, n);
      else
        cast_kernel<1><<<grid_for(n, 256), 256, 0, compute_stream()>>>(o, in, n);
      FTUNE_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace ftune::cuda
