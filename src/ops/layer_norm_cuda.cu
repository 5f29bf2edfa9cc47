// Layer norm (and its fusions with the residual add and the dropout before it) on CUDA; mirrors
// ops/layer_norm_cpu.cc.
//   Rows are read in groups of four elements per lane, as one 128-bit (or, for 16-bit data,
//   64-bit) access when C % 4 == 0 and the rows are 16-byte aligned, element by element
//   otherwise, in the same order (the same bits either way).
//   forward:  one warp per row: mean, biased variance, rstd = 1 / sqrt(var + eps) (IEEE sqrt and
//             division, as the CPU), out = (x - mean) * rstd * weight + bias (and its 16-bit copy
//             out_bf16 / out_f16 when asked, rounded from the same value). The fused forms first
//             write sum = a + b, or sum = dropout(a) + b (a of any float storage type: the
//             dropped value rounded to a's type, as the dropout op would have stored it), and then
//             run the very same code on it, so they give the same bits as dropout_forward,
//             residual_forward and layer_norm_forward in turn.
//   backward: one warp per row for dinp (overwritten):
//               dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight;
//             fused with dropout, the same pass also writes ddrop = dropout'(dinp) (of its own
//             float type), what dropout_backward would compute from the stored dinp;
//             then dweight += sum_rows dout * xhat, dbias += sum_rows dout (parameter gradients
//             accumulate) by the column reduction of cuda/column_reduce.cuh: the CPU's fixed
//             order (core/column_order.h), no atomics, the same bits on every run.
//   Dropout masks: the Philox streams of ops/dropout.h, element (r, c) at stream index
//   dropout_stream_index(runs, r C + c); with C % 4 == 0 a lane's group is one Philox block.
#include "cuda/column_reduce.cuh"
#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "cuda/vec.cuh"
#include "ops/dropout.h"
#include "ops/dropout_add_norm.h"
#include "ops/layer_norm.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kRowThreads = 256;  // 8 warps: 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / 32;

// A row's warp: lane `lane` owns the 4-element groups starting at c0 = 4 lane, 4 lane + 128, ...
// kVec (C % 4 == 0, every row 16-byte aligned): a group is one vector access; otherwise its
// elements one by one, the last group possibly partial. Either way a lane adds its elements in the
// same order: the two kernels give the same bits.
template <bool kVec, typename T>
__device__ __forceinline__ void load_group(const T* row, int64_t c0, int64_t C, float (&v)[4]) {
  if constexpr (kVec) {
    load_vec<4>(row + c0, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = c0 + j < C ? load_f32(row + c0 + j) : 0.0f;
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

// v rounded to T's precision (itself for float).
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  T t;
  store_f32(&t, v);
  return load_f32(&t);
}

// The dropout of a fused pass: p = 0 keeps everything (no Philox at all).
struct RowDropout {
  float p = 0.0f, scale = 1.0f;
  RngKey key{};
  DropoutRuns runs{};
};

// m[j] = the multipliers of elements c0 .. c0 + 3 of a row whose first element is stream index
// `s_row` (elements past C: 0, never used).
__device__ __forceinline__ void group_multipliers(const RowDropout& d, const RngKey& key,
                                                  uint64_t s_row, int64_t c0, int64_t C,
                                                  float (&m)[4]) {
  const uint64_t s0 = s_row + static_cast<uint64_t>(c0);
  if (C % 4 == 0) {  // s_row and c0 are multiples of 4: one Philox block
    const Philox4 r = philox_block(key, s0 >> 2);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      m[j] = philox_uniform(philox_word(r, s0 + j)) >= d.p ? d.scale : 0.0f;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      m[j] = c0 + j < C && philox_uniform_at(key, s0 + j) >= d.p ? d.scale : 0.0f;
  }
}

template <bool kVec, typename TA>
__global__ void layer_norm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                          const TA* a, const float* b, float* sum,
                                          const float* weight, const float* bias, int64_t N,
                                          int64_t C, float eps, bf16_t* out_bf16, f16_t* out_f16,
                                          RowDropout drop) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= N) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const int64_t first = 4 * lane;
  if (sum) {  // fused add: x = [dropout](a) + b, kept for the backward pass
    RngKey key = drop.key;
    DropoutRuns runs = drop.runs;
    uint64_t s_row = 0;
    if (drop.p > 0.0f) {
      resolve_micro(key, runs);  // a captured graph's micro-batch place, read at replay
      s_row = dropout_stream_index(runs, r * C);
    }
    float* s = sum + r * C;
    const TA* ar = a + r * C;
    const float* br = b + r * C;
    for (int64_t c0 = first; c0 < C; c0 += 128) {
      float x[4], y[4];
      load_group<kVec>(ar, c0, C, x);
      load_group<kVec>(br, c0, C, y);
      if (drop.p > 0.0f) {
        float m[4];
        group_multipliers(drop, key, s_row, c0, C, m);
        // __fmul_rn: never contracted with the add below into one FMA (the composition stores
        // the product before adding it).
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = rounded<TA>(__fmul_rn(x[j], m[j]));
      }
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
    if (bias) {
      load_group<kVec>(bias, c0, C, bi);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) bi[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = bias ? (v[j] - m) * rs * w[j] + bi[j] : (v[j] - m) * rs * w[j];
    store_group<kVec>(o, c0, C, v);
    if (out_bf16) store_group<kVec>(out_bf16 + r * C, c0, C, v);
    if (out_f16) store_group<kVec>(out_f16 + r * C, c0, C, v);
  }
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

// dinp, and with ddrop also dropout'(dinp) into ddrop (of type TD).
template <bool kVec, typename TD>
__global__ void layer_norm_dinp_kernel(float* dinp, TD* ddrop, const float* dout, const float* inp,
                                       const float* weight, const float* mean, const float* rstd,
                                       int64_t N, int64_t C, RowDropout drop) {
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
  RngKey key = drop.key;
  DropoutRuns runs = drop.runs;
  uint64_t s_row = 0;
  if (ddrop && drop.p > 0.0f) {
    resolve_micro(key, runs);
    s_row = dropout_stream_index(runs, r * C);
  }
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
    if (ddrop) {  // from the stored fp32 value, as dropout_backward reads it
      if (drop.p > 0.0f) {
        float mult[4];
        group_multipliers(drop, key, s_row, c0, C, mult);
#pragma unroll
        for (int j = 0; j < 4; ++j) xv[j] = __fmul_rn(xv[j], mult[j]);
      }
      store_group<kVec>(ddrop + r * C, c0, C, xv);
    }
  }
}

// The parameter gradients' column sums (cuda/column_reduce.cuh): per element dout * xhat and
// dout; then dweight += the first total, dbias += the second.
struct LayerNormParamValues {
  const float *dout, *inp, *mean, *rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    const float dy = dout[r * C + c];
    v[0] = dy * ((inp[r * C + c] - mean[r]) * rstd[r]);
    v[1] = dy;
  }
};
struct LayerNormParamAdd {
  float *dweight, *dbias;
  __device__ void operator()(int64_t c, const float* t) const {
    dweight[c] += t[0];
    if (dbias) dbias[c] += t[1];
  }
};

RowDropout row_dropout(float p, RngKey rng, DropoutRuns runs) {
  RowDropout d;
  d.p = p;
  d.scale = 1.0f / (1.0f - p);  // as dropout_apply_mixed computes it
  d.key = rng;
  d.runs = runs;
  return d;
}

template <typename TA>
void forward(float* out, float* mean, float* rstd, const float* inp, const TA* a, const float* b,
             float* sum, const float* weight, const float* bias, int64_t N, int64_t C, float eps,
             bf16_t* out_bf16, f16_t* out_f16, const RowDropout& drop) {
  if (N == 0) return;
  const bool vec = C % 4 == 0 && all_aligned16(out, weight, bias) &&
                   (sum ? all_aligned16(a, b, sum) : aligned16(inp)) &&
                   (!out_bf16 || aligned16(out_bf16)) && (!out_f16 || aligned16(out_f16));
  (vec ? layer_norm_forward_kernel<true, TA> : layer_norm_forward_kernel<false, TA>)
      <<<grid_for(N, kRowsPerBlock), kRowThreads, 0, compute_stream()>>>(
          out, mean, rstd, inp, a, b, sum, weight, bias, N, C, eps, out_bf16, out_f16, drop);
  FTUNE_CUDA_CHECK_LAUNCH();
}

template <typename TD>
void backward(float* dinp, TD* ddrop, float* dweight, float* dbias, const float* dout,
              const float* inp, const float* weight, const float* mean, const float* rstd,
              int64_t N, int64_t C, const RowDropout& drop) {
  if (N == 0 || C == 0) return;
  const bool vec = C % 4 == 0 && all_aligned16(dinp, dout, inp, weight) &&
                   (!ddrop || aligned16(ddrop));
  (vec ? layer_norm_dinp_kernel<true, TD> : layer_norm_dinp_kernel<false, TD>)
      <<<grid_for(N, kRowsPerBlock), kRowThreads, 0, compute_stream()>>>(
          dinp, ddrop, dout, inp, weight, mean, rstd, N, C, drop);
  FTUNE_CUDA_CHECK_LAUNCH();
  if (!dweight) return;
  column_reduce<2>(N, C, LayerNormParamValues{dout, inp, mean, rstd, C},
                   LayerNormParamAdd{dweight, dbias});
}

}  // namespace

void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* a,
                        const float* b, float* sum, const float* weight, const float* bias,
                        int64_t N, int64_t C, float eps, bf16_t* out_bf16, f16_t* out_f16) {
  forward(out, mean, rstd, inp, a, b, sum, weight, bias, N, C, eps, out_bf16, out_f16,
          RowDropout{});
}

void dropout_add_layer_norm_forward(float* out, float* mean, float* rstd, const void* a,
                                    DType a_type, const float* b, float* sum, const float* weight,
                                    const float* bias, int64_t N, int64_t C, float eps,
                                    bf16_t* out_bf16, f16_t* out_f16, float p, RngKey rng,
                                    DropoutRuns runs) {
  const RowDropout drop = row_dropout(p, rng, runs);
  with_float_type(a_type, const_cast<void*>(a), [&](auto* pa) {
    forward(out, mean, rstd, nullptr, pa, b, sum, weight, bias, N, C, eps, out_bf16, out_f16,
            drop);
  });
}

void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C) {
  backward(dinp, static_cast<float*>(nullptr), dweight, dbias, dout, inp, weight, mean, rstd, N, C,
           RowDropout{});
}

void layer_norm_dropout_backward(float* dinp, void* ddrop, DType ddrop_type, float* dweight,
                                 float* dbias, const float* dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd,
                                 int64_t N, int64_t C, float p, RngKey rng, DropoutRuns runs) {
  const RowDropout drop = row_dropout(p, rng, runs);
  with_float_type(ddrop_type, ddrop, [&](auto* pd) {
    backward(dinp, pd, dweight, dbias, dout, inp, weight, mean, rstd, N, C, drop);
  });
}

}  // namespace ftune::cuda
