// The first, unfused CUDA disentangled attention (before the fused kernel of
// ops/disentangled_attention_cuda.cu replaced it), unchanged but for its names, for
// cuda_kernels_bench's DeBERTa "before" numbers only: one block per query row writing P (B, H, T, T)
// and, backward, dS (B, H, T, T), then one thread per output element.
#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "disentangled_unfused_old.h"

namespace ftune::bench_old {
using namespace ftune::cuda;
namespace {

constexpr unsigned kThreads = 128;

unsigned blocks_for(int64_t n, unsigned threads) {
  const int64_t b = (n + threads - 1) / threads;
  if (b > 0x7fffffff) throw ShapeError("disentangled_attention (CUDA): grid over 2^31 blocks");
  return static_cast<unsigned>(b);
}

__device__ float keep_multiplier(const RngKey& rng, uint64_t e, float p) {
  return philox_uniform_at(rng, e) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

__device__ float dot(const float* x, const float* y, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; ++d) s += x[d] * y[d];
  return s;
}

// Block (b H + h) T + i: row i of P.
__global__ void scores_kernel(DisentangledArgs a, float* probs, const float* q, const float* k,
                              const float* pk, const float* pq) {
  __shared__ float red[32];
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t i = blockIdx.x % T, u = blockIdx.x / T, b = u / H, h = u % H;
  float* row = probs + blockIdx.x * T;
  const float* qi = q + (b * T + i) * a.ldq + h * D;
  const bool real_i = a.real(b, i);
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float* kj = k + (b * T + j) * a.ldk + h * D;
    const int64_t r = a.rel(i, j);
    float s = a.scale * dot(qi, kj, D);
    if (a.spec.c2p) s += a.scale * dot(qi, pk + r * a.ldpk + h * D, D);
    if (a.spec.p2c) s += a.scale * dot(kj, pq + r * a.ldpq + h * D, D);
    row[j] = s;
    if (a.real(b, j)) mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float e = a.real(b, j) ? expf(row[j] - mx) : 0.0f;
    row[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    row[j] = real_i ? row[j] / sum : 1.0f / static_cast<float>(T);
}

// One thread per element (b, i, h, d) of out.
__global__ void output_kernel(DisentangledArgs a, float* out, const float* probs, const float* v) {
  uint64_t row0 = a.row0;
  RngKey rng = a.rng;
  resolve_micro(rng, row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= a.B * T * H * D) return;
  const int64_t d = e % D, h = (e / D) % H, i = (e / (D * H)) % T, b = e / (D * H * T);
  const float* P = probs + ((b * H + h) * T + i) * T;
  const uint64_t s0 = a.stream_row(row0, b, h, i);
  float acc = 0.0f;
  for (int64_t j = 0; j < T; ++j) {
    const float m = a.dropout_p > 0.0f ? keep_multiplier(rng, s0 + j, a.dropout_p) : 1.0f;
    acc += P[j] * m * v[(b * T + j) * a.ldv + h * D + d];
  }
  out[(b * T + i) * a.ldo + h * D + d] = acc;
}

// Block (b H + h) T + i: row i of dS.
__global__ void score_grad_kernel(DisentangledArgs a, float* dS, const float* dout, const float* v,
                                  const float* probs) {
  __shared__ float red[32];
  uint64_t row0 = a.row0;
  RngKey rng = a.rng;
  resolve_micro(rng, row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t i = blockIdx.x % T, u = blockIdx.x / T, b = u / H, h = u % H;
  const float* P = probs + blockIdx.x * T;
  float* g = dS + blockIdx.x * T;
  const float* dOi = dout + (b * T + i) * a.ldo + h * D;
  const uint64_t s0 = a.stream_row(row0, b, h, i);
  float part = 0.0f;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    float dp = dot(dOi, v + (b * T + j) * a.ldv + h * D, D);
    if (a.dropout_p > 0.0f) dp *= keep_multiplier(rng, s0 + j, a.dropout_p);
    g[j] = dp;
    part += P[j] * dp;
  }
  const float rowdot = block_sum(part, red);
  const bool real_i = a.real(b, i);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    g[j] = real_i ? a.scale * P[j] * (g[j] - rowdot) : 0.0f;
}

// One thread per element (b, i, h, d) of dq.
__global__ void dq_kernel(DisentangledArgs a, float* dq, const float* dS, const float* k,
                          const float* pk) {
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= a.B * T * H * D) return;
  const int64_t d = e % D, h = (e / D) % H, i = (e / (D * H)) % T, b = e / (D * H * T);
  const float* g = dS + ((b * H + h) * T + i) * T;
  float acc = 0.0f;
  for (int64_t j = 0; j < T; ++j) {
    float x = k[(b * T + j) * a.ldk + h * D + d];
    if (a.spec.c2p) x += pk[a.rel(i, j) * a.ldpk + h * D + d];
    acc += g[j] * x;
  }
  dq[(b * T + i) * a.lddq + h * D + d] = acc;
}

// One thread per element (b, j, h, d) of dk and dv.
__global__ void dkv_kernel(DisentangledArgs a, float* dk, float* dv, const float* dS,
                           const float* probs, const float* dout, const float* q,
                           const float* pq) {
  uint64_t row0 = a.row0;
  RngKey rng = a.rng;
  resolve_micro(rng, row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= a.B * T * H * D) return;
  const int64_t d = e % D, h = (e / D) % H, j = (e / (D * H)) % T, b = e / (D * H * T);
  float acc_k = 0.0f, acc_v = 0.0f;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t row = ((b * H + h) * T + i) * T + j;
    float x = q[(b * T + i) * a.ldq + h * D + d];
    if (a.spec.p2c) x += pq[a.rel(i, j) * a.ldpq + h * D + d];
    acc_k += dS[row] * x;
    const float m =
        a.dropout_p > 0.0f ? keep_multiplier(rng, a.stream_row(row0, b, h, i) + j, a.dropout_p)
                           : 1.0f;
    acc_v += probs[row] * m * dout[(b * T + i) * a.ldo + h * D + d];
  }
  dk[(b * T + j) * a.lddk + h * D + d] = acc_k;
  dv[(b * T + j) * a.lddv + h * D + d] = acc_v;
}

// One thread per element (r, h, d) of dpk and dpq: the pairs (b, i, j) with r(i, j) = r, in order.
__global__ void dpos_kernel(DisentangledArgs a, float* dpk, float* dpq, const float* dS,
                            const float* q, const float* k) {
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, R = 2 * a.spec.span();
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= R * H * D) return;
  const int64_t d = e % D, h = (e / D) % H, r = e / (D * H);
  float acc_k = 0.0f, acc_q = 0.0f;
  for (int64_t delta = -(T - 1); delta <= T - 1; ++delta) {
    if (a.rel_index[delta + T - 1] != r) continue;
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t i = delta > 0 ? delta : 0; i < T && i - delta < T; ++i) {
        const int64_t j = i - delta;
        const float g = dS[((b * H + h) * T + i) * T + j];
        acc_k += g * q[(b * T + i) * a.ldq + h * D + d];
        acc_q += g * k[(b * T + j) * a.ldk + h * D + d];
      }
  }
  if (a.spec.c2p) dpk[r * a.lddpk + h * D + d] = acc_k;
  if (a.spec.p2c) dpq[r * a.lddpq + h * D + d] = acc_q;
}

}  // namespace

void disentangled_forward_unfused(const DisentangledArgs& a, float* out, float* probs,
                                    const float* q, const float* k, const float* v,
                                    const float* pk, const float* pq) {
  const int64_t rows = a.B * a.spec.heads * a.T, elems = a.B * a.T * a.spec.heads * a.spec.head_dim;
  scores_kernel<<<blocks_for(rows, 1), kThreads, 0, compute_stream()>>>(a, probs, q, k, pk, pq);
  FTUNE_CUDA_CHECK_LAUNCH();
  output_kernel<<<blocks_for(elems, kThreads), kThreads, 0, compute_stream()>>>(a, out, probs, v);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void disentangled_backward_unfused(const DisentangledArgs& a, float* dq, float* dk, float* dv,
                                     float* dpk, float* dpq, const float* dout, const float* q,
                                     const float* k, const float* v, const float* pk,
                                     const float* pq, const float* probs, float* dS) {
  const int64_t rows = a.B * a.spec.heads * a.T, elems = a.B * a.T * a.spec.heads * a.spec.head_dim;
  const int64_t pos = 2 * a.spec.span() * a.spec.heads * a.spec.head_dim;
  score_grad_kernel<<<blocks_for(rows, 1), kThreads, 0, compute_stream()>>>(a, dS, dout, v, probs);
  FTUNE_CUDA_CHECK_LAUNCH();
  dq_kernel<<<blocks_for(elems, kThreads), kThreads, 0, compute_stream()>>>(a, dq, dS, k, pk);
  FTUNE_CUDA_CHECK_LAUNCH();
  dkv_kernel<<<blocks_for(elems, kThreads), kThreads, 0, compute_stream()>>>(a, dk, dv, dS, probs,
                                                                            dout, q, pq);
  FTUNE_CUDA_CHECK_LAUNCH();
  if (a.spec.c2p || a.spec.p2c) {
    dpos_kernel<<<blocks_for(pos, kThreads), kThreads, 0, compute_stream()>>>(a, dpk, dpq, dS, q,
                                                                             k);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ftune::bench_old
