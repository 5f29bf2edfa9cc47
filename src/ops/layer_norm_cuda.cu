// Layer norm (and the fused residual add + layer norm) on CUDA; mirrors ops/layer_norm_cpu.cc.
//   Rows are read in groups of four elements per lane, as float4 when C % 4 == 0 and the rows are
//   16-byte aligned, element by element otherwise, in the same order (the same bits either way).
//   forward:  one warp per row: mean, biased variance, rstd = 1 / sqrt(var + eps) (IEEE sqrt and
//             division, as the CPU), out = (x - mean) * rstd * weight + bias (and its 16-bit copy
//             out_bf16 / out_f16 when asked, rounded from the same value). The fused form first
//             writes sum = a + b and then runs the very same code on it, so it gives the same
//             bits as residual_forward followed by layer_norm_forward.
//   backward: one warp per row for dinp (overwritten):
//               dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight;
//             then dweight += sum_rows dout * xhat, dbias += sum_rows dout (parameter gradients
//             accumulate) by a column reduction with a fixed order: no atomics, the same bits on
//             every run. The CPU's `workspace` is not needed here.
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/reduce.cuh"
#include "cuda/vec.cuh"
#include "ops/layer_norm.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kRowThreads = 256;  // 8 warps: 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / 32;

// A row's warp: lane `lane` owns the 4-element groups starting at c0 = 4 lane, 4 lane + 128, ...
// kVec (C % 4 == 0, every row 16-byte aligned): a group is one float4 (a 64-bit access for a
// 16-bit copy); otherwise its elements one by one, the last group possibly partial. Either way a
// lane adds its elements in the same order: the two kernels give the same bits.
template <bool kVec>
__device__ __forceinline__ void load_group(const float* row, int64_t c0, int64_t C, float (&v)[4]) {
  if constexpr (kVec) {
    load_vec<4>(row + c0, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = c0 + j < C ? row[c0 + j] : 0.0f;
  }
}
template <bool kVec, typename T>
__device__ __forceinline__ void store_group(T* row, int64_t c0, int64_t C, const float (&v)[4]) {
  if constexpr (kVec) {
    store_vec<4>(row + c0, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (c0 + j < C) store_f32(row + c0 + j, v[j]);
  }
}

template <bool kVec>
__global__ void layer_norm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                          const float* a, const float* b, float* sum,
                                          const float* weight, const float* bias, int64_t N,
                                          int64_t C, float eps, bf16_t* out_bf16,
                                          f16_t* out_f16) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= N) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const int64_t first = 4 * lane;
  if (sum) {  // fused residual add: x = a + b, kept for the backward pass
    float* s = sum + r * C;
    const float* ar = a + r * C;
    const float* br = b + r * C;
    for (int64_t c0 = first; c0 < C; c0 += 128) {
      float x[4], y[4];
      load_group<kVec>(ar, c0, C, x);
      load_group<kVec>(br, c0, C, y);
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] += y[j];
      store_group<kVec>(s, c0, C, x);
    }
    __syncwarp();
  }
  const float* x = sum ? sum + r * C : inp + r * C;
  float m = 0.0f;
  for (int64_t c0 = first; c0 < C; c0 += 128) {
    float v[4];
    load_group<kVec>(x, c0, C, v);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (kVec || c0 + j < C) m += v[j];
  }
  m = warp_sum(m) / static_cast<float>(C);
  float var = 0.0f;  // biased variance, as PyTorch
  for (int64_t c0 = first; c0 < C; c0 += 128) {
    float v[4];
    load_group<kVec>(x, c0, C, v);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (kVec || c0 + j < C) var += (v[j] - m) * (v[j] - m);
  }
  var = warp_sum(var) / static_cast<float>(C);
  const float rs = 1.0f / sqrtf(var + eps);
  float* o = out + r * C;
  for (int64_t c0 = first; c0 < C; c0 += 128) {
    float v[4], w[4], bi[4];
    load_group<kVec>(x, c0, C, v);
    load_group<kVec>(weight, c0, C, w);
    load_group<kVec>(bias, c0, C, bi);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = (v[j] - m) * rs * w[j] + bi[j];
    store_group<kVec>(o, c0, C, v);
    if (out_bf16) store_group<kVec>(out_bf16 + r * C, c0, C, v);
    if (out_f16) store_group<kVec>(out_f16 + r * C, c0, C, v);
  }
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <bool kVec>
__global__ void layer_norm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                       const float* weight, const float* mean, const float* rstd,
                                       int64_t N, int64_t C) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= N) return;
  const int lane = threadIdx.x % 32;
  const int64_t first = 4 * lane;
  const float* x = inp + r * C;
  const float* dy = dout + r * C;
  const float m = mean[r], rs = rstd[r];
  float mean_g = 0.0f, mean_gx = 0.0f;
  for (int64_t c0 = first; c0 < C; c0 += 128) {
    float xv[4], d[4], w[4];
    load_group<kVec>(x, c0, C, xv);
    load_group<kVec>(dy, c0, C, d);
    load_group<kVec>(weight, c0, C, w);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (kVec || c0 + j < C) {
        const float xhat = (xv[j] - m) * rs;
        const float g = d[j] * w[j];
        mean_g += g;
        mean_gx += g * xhat;
      }
  }
  mean_g = warp_sum(mean_g) / static_cast<float>(C);
  mean_gx = warp_sum(mean_gx) / static_cast<float>(C);
  float* dx = dinp + r * C;
  for (int64_t c0 = first; c0 < C; c0 += 128) {
    float xv[4], d[4], w[4];
    load_group<kVec>(x, c0, C, xv);
    load_group<kVec>(dy, c0, C, d);
    load_group<kVec>(weight, c0, C, w);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float xhat = (xv[j] - m) * rs;
      xv[j] = rs * (d[j] * w[j] - mean_g - xhat * mean_gx);
    }
    store_group<kVec>(dx, c0, C, xv);
  }
}

// dweight[c] += sum_r dout[r, c] * xhat[r, c];  dbias[c] += sum_r dout[r, c]. A block of 32 x 32
// threads owns 32 columns; thread (x, y) sums rows y, y + 32, ...; the 32 partial sums of a
// column are then added in y order.
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

void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* a,
                        const float* b, float* sum, const float* weight, const float* bias,
                        int64_t N, int64_t C, float eps, bf16_t* out_bf16, f16_t* out_f16) {
  if (N == 0) return;
  const bool vec = C % 4 == 0 && all_aligned16(out, weight, bias) &&
                   (sum ? all_aligned16(a, b, sum) : aligned16(inp)) &&
                   (!out_bf16 || aligned16(out_bf16)) && (!out_f16 || aligned16(out_f16));
  (vec ? layer_norm_forward_kernel<true> : layer_norm_forward_kernel<false>)
      <<<grid_for(N, kRowsPerBlock), kRowThreads, 0, compute_stream()>>>(
          out, mean, rstd, inp, a, b, sum, weight, bias, N, C, eps, out_bf16, out_f16);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C) {
  if (N == 0 || C == 0) return;
  const bool vec = C % 4 == 0 && all_aligned16(dinp, dout, inp, weight);
  (vec ? layer_norm_dinp_kernel<true> : layer_norm_dinp_kernel<false>)
      <<<grid_for(N, kRowsPerBlock), kRowThreads, 0, compute_stream()>>>(dinp, dout, inp, weight,
                                                                         mean, rstd, N, C);
  FTUNE_CUDA_CHECK_LAUNCH();
  if (!dweight) return;
  layer_norm_params_kernel<<<grid_for(C, 32), dim3(32, 32), 0, compute_stream()>>>(dweight, dbias, dout, inp, mean, rstd,
                                                              N, C);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
