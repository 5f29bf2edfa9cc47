// Cast on CUDA: one thread per element, fp32 in registers, rounded once on the store.
#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "ops/cast.h"

namespace ftune::cuda {
namespace {

template <typename To, typename From>
__global__ void cast_kernel(To* out, const From* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store_f32(out + i, load_f32(inp + i));
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
      cast_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(o, in, n);
      FTUNE_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace ftune::cuda
