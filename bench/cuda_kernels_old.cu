// The kernels before issue 25 (see cuda_kernels_old.h), for cuda_kernels_bench only.
#include "cuda_kernels_old.h"
#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"

namespace ftune::bench_old {
namespace {

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids,
                                          int64_t N, int64_t C, int64_t padding_idx) {
  const int64_t n = blockIdx.x;
  const int32_t id = ids[n];
  if (id == padding_idx) return;
  int earlier = 0;
  for (int64_t m = threadIdx.x; m < n; m += blockDim.x)
    if (ids[m] == id) {
      earlier = 1;
      break;
    }
  if (__syncthreads_or(earlier)) return;
  float* row = dtable + static_cast<int64_t>(id) * C;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t c0 = static_cast<int64_t>(warp) * 32; c0 < C; c0 += blockDim.x) {
    const int64_t c = c0 + lane;
    float acc = c < C ? row[c] : 0.0f;
    for (int64_t base = n; base < N; base += 32) {
      const int64_t m = base + lane;
      unsigned match = __ballot_sync(cuda::kFullMask, m < N && ids[m] == id);
      while (match) {
        const int j = __ffs(match) - 1;
        match &= match - 1;
        if (c < C) acc += dout[(base + j) * C + c];
      }
    }
    if (c < C) row[c] = acc;
  }
}

template <typename T>
__global__ void __launch_bounds__(1024)
    add_column_sums_kernel(float* out, const T* inp, int64_t ld, int64_t rows, int64_t cols) {
  __shared__ float partial[32][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += 32) acc += cuda::load_f32(inp + r * ld + c);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int k = 0; k < 32; ++k) s += partial[k][threadIdx.x];
    out[c] += s;
  }
}

__global__ void __launch_bounds__(1024)
    layer_norm_params_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* mean, const float* rstd, int64_t N, int64_t C) {
  __shared__ float pw[32][33];
  __shared__ float pb[32][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc_w = 0.0f, acc_b = 0.0f;
  if (c < C)
    for (int64_t r = threadIdx.y; r < N; r += 32) {
      const float dy = dout[r * C + c];
      acc_w += dy * (inp[r * C + c] - mean[r]) * rstd[r];
      acc_b += dy;
    }
  pw[threadIdx.y][threadIdx.x] = acc_w;
  pb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < 32; ++k) {
      sw += pw[k][threadIdx.x];
      sb += pb[k][threadIdx.x];
    }
    dweight[c] += sw;
    dbias[c] += sb;
  }
}

}  // namespace

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t padding_idx) {
  if (N * C == 0) return;
  embedding_backward_kernel<<<static_cast<unsigned>(N), 256, 0, cuda::compute_stream()>>>(
      dtable, dout, ids, N, C, padding_idx);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void add_column_sums(float* out, const void* x, DType type, int64_t ld, int64_t rows,
                     int64_t cols) {
  cuda::with_float_type(type, const_cast<void*>(x), [&](auto* p) {
    add_column_sums_kernel<<<cuda::grid_for(cols, 32), dim3(32, 32), 0, cuda::compute_stream()>>>(
        out, p, ld, rows, cols);
  });
  FTUNE_CUDA_CHECK_LAUNCH();
}

void layer_norm_params(float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* mean, const float* rstd, int64_t N, int64_t C) {
  layer_norm_params_kernel<<<cuda::grid_for(C, 32), dim3(32, 32), 0, cuda::compute_stream()>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::bench_old
