// Attention on CUDA (fp32, or bf16 / f16 storage under mixed precision: qkv, out, dout and dqkv
// of storage type S, every product, the softmax and the probabilities in fp32): the plain fallback kernel of the CUDA backend, a twin of
// ops/attention_cpu.cc (same layouts, masking, dropout stream and gradient rule: dqkv is
// overwritten). One block of kThreads threads per query row (b, h, i) or key row (b, h, j); each
// thread takes keys (or queries) j = t, t + kThreads, ... for the scores and the head dimension
// d = t, t + kThreads, ... for the products with V, K or Q, each summed serially in index order.
// No float atomics anywhere: the same inputs give the same bits on every run.
//   forward (per query row i):
//     s_j = scale q_i . k_j;  P_ij = masked softmax_j(s) (max-subtracted, fast_exp as the CPU);
//     P'_ij = P_ij * m_ij (m from Philox at the stream index of ops/attention.h);
//     out_i = sum_j P'_ij v_j.
//   backward, pass 1 (per query row i):
//     dP_ij = m_ij (dO_i . v_j);  r_i = sum_j P_ij dP_ij;  dS_ij = P_ij (dP_ij - r_i);
//     dq_i = scale sum_j dS_ij k_j;  r_i is kept in the workspace.
//   backward, pass 2 (per key row j, summing over every query row i):
//     dv_j = sum_i P'_ij dO_i;  dk_j = scale sum_i dS_ij q_i  (dS_ij rebuilt from r_i).
// Keys from the last real key of a sequence on are padding: probability 0 and zero dk, dv; a
// sequence with no real key attends uniformly to all T keys (HF's additive-mask behaviour).
// Limits: shared memory of (D + 2T) floats per block must fit 47 KiB (e.g. T = 512, D = 64 uses
// 4.3 KiB; T up to ~5980 at D = 64; a clear ShapeError otherwise); the backward pass keeps T floats per (b, h) in
// the caller's workspace (at least T floats; a planned run reserves B*H*T, ops/attention.h) and
// walks the (b, h) pairs in chunks of floor(workspace / T); the forward pass reads none.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/streams.cuh"
#include "cuda/reduce.cuh"
#include "ops/attention.h"
#include "ops/fast_math.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 128;
// Dynamic shared memory per block: the default 48 KiB limit less room for the static reduction
// scratch (no opt-in attribute needed on any architecture).
constexpr size_t kMaxSharedBytes = 47 * 1024;

using cpu::AttentionDims;

// Keys [0, L) hold every real token of the sequence (L = 0: all padding). Every thread gets L.
__device__ int64_t attended_keys(const int32_t* mask, int64_t T, int* shared) {
  if (threadIdx.x == 0) *shared = 0;
  __syncthreads();
  int last = 0;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    if (mask[j] != 0) last = static_cast<int>(j) + 1;
  if (last > 0) atomicMax(shared, last);  // integer maximum: the same result in any order
  __syncthreads();
  return *shared;
}

// Stream index of probability element (b, h, i, 0) (ops/attention.h).
__device__ uint64_t stream_row(const AttentionDims& d, int64_t b, int64_t h, int64_t i) {
  const uint64_t Tv = static_cast<uint64_t>(d.Tv > 0 ? d.Tv : d.T);
  return (((d.row0 + static_cast<uint64_t>(b)) * d.H + h) * Tv + i) * Tv;
}

// The dropout multiplier of stream element e, as cpu::dropout_multipliers computes it.
__device__ float keep_multiplier(RngKey rng, uint64_t e, float p, float inv_keep) {
  return philox_uniform_at(rng, e) >= p ? inv_keep : 0.0f;
}

// Grid: B * H * T blocks, block (b * H + h) * T + i. Shared: q_i (D), then the row (T).
template <typename S>
__global__ void attention_forward_kernel(S* out, float* probs, const S* qkv,
                                         const int32_t* key_mask, AttentionDims d, float p,
                                         RngKey rng) {
  resolve_micro(rng, d.row0);  // a captured graph's micro-batch place, read at replay
  extern __shared__ float sh[];
  __shared__ float red[32];
  __shared__ int last_key;
  const int64_t T = d.T, H = d.H, D = d.D, C = H * D, C3 = 3 * C;
  const int64_t row = blockIdx.x, i = row % T, u = row / T, b = u / H, h = u % H;
  const int32_t* mask = key_mask + b * T;
  const S* q = qkv + (b * T + i) * C3 + h * D;
  const S* k = qkv + b * T * C3 + C + h * D;  // key j at k + j * C3
  const S* v = k + C;
  float* qs = sh;
  float* w = sh + D;
  const int64_t L = attended_keys(mask, T, &last_key);
  const int64_t keys = L > 0 ? L : T;  // an all-padding row attends uniformly to all keys (HF)
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) qs[c] = load_f32(q + c);
  __syncthreads();

  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  float* P = probs + row * T;  // (T): columns >= keys are 0
  if (L > 0) {
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
      const S* kj = k + j * C3;
      float s = 0.0f;
      for (int64_t c = 0; c < D; ++c) s += qs[c] * load_f32(kj + c);
      w[j] = scale * s;
      if (mask[j]) mx = fmaxf(mx, w[j]);
    }
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < keys; j += blockDim.x)
      sum += (w[j] = mask[j] ? fast_exp(w[j] - mx) : 0.0f);
    const float inv = 1.0f / block_sum(sum, red);
    for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) w[j] *= inv;
  } else {
    for (int64_t j = threadIdx.x; j < T; j += blockDim.x) w[j] = 1.0f / static_cast<float>(T);
  }
  const uint64_t e0 = stream_row(d, b, h, i);
  const float inv_keep = 1.0f / (1.0f - p);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float pj = j < keys ? w[j] : 0.0f;
    P[j] = pj;
    if (j < keys && p > 0.0f) w[j] = pj * keep_multiplier(rng, e0 + j, p, inv_keep);
  }
  __syncthreads();
  S* o = out + (b * T + i) * C + h * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < keys; ++j) acc += w[j] * load_f32(v + j * C3 + c);
    store_f32(o + c, acc);
  }
}

// Backward pass 1. Grid: n * T blocks for the pairs u = u0 .. u0 + n - 1, block (u - u0) * T + i.
// Writes dq_i and r_i = sum_j P_ij dP_ij into rsum[(u - u0) * T + i]. Shared: dO_i (D), dS (T).
template <typename S>
__global__ void attention_dq_kernel(S* dqkv, float* rsum, const S* dout, const S* qkv,
                                    const float* probs, const int32_t* key_mask, AttentionDims d,
                                    int64_t u0, float p, RngKey rng) {
  resolve_micro(rng, d.row0);  // a captured graph's micro-batch place, read at replay
  extern __shared__ float sh[];
  __shared__ float red[32];
  __shared__ int last_key;
  const int64_t T = d.T, H = d.H, D = d.D, C = H * D, C3 = 3 * C;
  const int64_t local = blockIdx.x, i = local % T, u = u0 + local / T, b = u / H, h = u % H;
  const int64_t L = attended_keys(key_mask + b * T, T, &last_key);
  const int64_t keys = L > 0 ? L : T;
  const S* k = qkv + b * T * C3 + C + h * D;
  const S* v = k + C;
  const S* dO = dout + (b * T + i) * C + h * D;
  const float* P = probs + (u * T + i) * T;
  float* dos = sh;
  float* ds = sh + D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) dos[c] = load_f32(dO + c);
  __syncthreads();

  const uint64_t e0 = stream_row(d, b, h, i);
  const float inv_keep = 1.0f / (1.0f - p);
  float r = 0.0f;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const S* vj = v + j * C3;
    float dp = 0.0f;
    for (int64_t c = 0; c < D; ++c) dp += dos[c] * load_f32(vj + c);
    if (p > 0.0f) dp *= keep_multiplier(rng, e0 + j, p, inv_keep);
    ds[j] = dp;
    r += P[j] * dp;
  }
  r = block_sum(r, red);
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) ds[j] = P[j] * (ds[j] - r);
  if (threadIdx.x == 0) rsum[local] = r;
  __syncthreads();
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  S* dq = dqkv + (b * T + i) * C3 + h * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < keys; ++j) acc += ds[j] * load_f32(k + j * C3 + c);
    store_f32(dq + c, scale * acc);
  }
}

// Backward pass 2. Grid: n * T blocks, block (u - u0) * T + j for key j. Shared: v_j (D), then
// P'_ij and dS_ij for every query row i (T each).
template <typename S>
__global__ void attention_dkv_kernel(S* dqkv, const float* rsum, const S* dout,
                                     const S* qkv, const float* probs, const int32_t* key_mask,
                                     AttentionDims d, int64_t u0, float p, RngKey rng) {
  resolve_micro(rng, d.row0);  // a captured graph's micro-batch place, read at replay
  extern __shared__ float sh[];
  __shared__ int last_key;
  const int64_t T = d.T, H = d.H, D = d.D, C = H * D, C3 = 3 * C;
  const int64_t local = blockIdx.x, j = local % T, u = u0 + local / T, b = u / H, h = u % H;
  const int64_t L = attended_keys(key_mask + b * T, T, &last_key);
  const int64_t keys = L > 0 ? L : T;
  S* dk = dqkv + (b * T + j) * C3 + C + h * D;
  S* dv = dk + C;
  if (j >= keys) {  // padding key past the last real one: no probability, no gradient
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
      store_f32(dk + c, 0.0f);
      store_f32(dv + c, 0.0f);
    }
    return;
  }
  const S* q = qkv + b * T * C3 + h * D;  // query i at q + i * C3
  const S* vj = q + 2 * C + j * C3;
  const S* dO = dout + b * T * C + h * D;  // dO_i at dO + i * C
  const float* P = probs + u * T * T;
  const float* r = rsum + (local / T) * T;
  float* vs = sh;
  float* pd = sh + D;
  float* ds = sh + D + T;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) vs[c] = load_f32(vj + c);
  __syncthreads();

  const float inv_keep = 1.0f / (1.0f - p);
  for (int64_t i = threadIdx.x; i < T; i += blockDim.x) {
    const S* dOi = dO + i * C;
    float dp = 0.0f;
    for (int64_t c = 0; c < D; ++c) dp += load_f32(dOi + c) * vs[c];
    const float m = p > 0.0f ? keep_multiplier(rng, stream_row(d, b, h, i) + j, p, inv_keep) : 1.0f;
    const float pij = P[i * T + j];
    pd[i] = pij * m;
    ds[i] = pij * (dp * m - r[i]);
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc_v = 0.0f, acc_k = 0.0f;
    for (int64_t i = 0; i < T; ++i) {
      acc_v += pd[i] * load_f32(dO + i * C + c);
      acc_k += ds[i] * load_f32(q + i * C3 + c);
    }
    store_f32(dv + c, acc_v);
    store_f32(dk + c, scale * acc_k);
  }
}

size_t shared_bytes(const char* op, const AttentionDims& d, int64_t rows_of_t) {
  const size_t bytes = static_cast<size_t>(d.D + rows_of_t * d.T) * sizeof(float);
  if (bytes > kMaxSharedBytes)
    throw ShapeError(std::string(op) + " (CUDA): sequence length " + std::to_string(d.T) +
                     " with head size " + std::to_string(d.D) + " needs " +
                     std::to_string(bytes) + " bytes of shared memory per block, more than the " +
                     std::to_string(kMaxSharedBytes) +
                     " this kernel uses (shorten max_seq_length)");
  return bytes;
}

template <typename S>
void attention_forward_t(S* out, float* probs, const S* qkv, const int32_t* key_mask,
                         AttentionDims dims, float dropout_p, RngKey rng) {
  const size_t shared = shared_bytes("attention_forward", dims, 1);
  const int64_t rows = dims.B * dims.H * dims.T;
  if (rows == 0) return;
  attention_forward_kernel<<<static_cast<unsigned>(rows), kThreads, shared, compute_stream()>>>(
      out, probs, qkv, key_mask, dims, dropout_p, rng);
  FTUNE_CUDA_CHECK_LAUNCH();
}

template <typename S>
void attention_backward_t(S* dqkv, const S* dout, const S* qkv, const float* probs,
                          const int32_t* key_mask, AttentionDims dims, float dropout_p, RngKey rng,
                          float* workspace, int64_t workspace_floats) {
  const size_t shared_dq = shared_bytes("attention_backward", dims, 1);
  const size_t shared_dkv = shared_bytes("attention_backward", dims, 2);
  const int64_t pairs = dims.B * dims.H, T = dims.T;
  if (pairs == 0 || T == 0) return;
  const int64_t chunk = workspace_floats / T;  // (b, h) pairs whose row sums fit the workspace
  if (chunk < 1)
    throw ShapeError("attention_backward (CUDA): workspace of " +
                     std::to_string(workspace_floats) + " floats, needs " + std::to_string(T));
  for (int64_t u0 = 0; u0 < pairs; u0 += chunk) {
    const int64_t n = std::min(chunk, pairs - u0);
    const unsigned blocks = static_cast<unsigned>(n * T);
    attention_dq_kernel<<<blocks, kThreads, shared_dq, compute_stream()>>>(dqkv, workspace, dout, qkv, probs,
                                                         key_mask, dims, u0, dropout_p, rng);
    FTUNE_CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<<<blocks, kThreads, shared_dkv, compute_stream()>>>(dqkv, workspace, dout, qkv, probs,
                                                           key_mask, dims, u0, dropout_p, rng);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void attention_forward(float* out, float* probs, const float* qkv, const int32_t* key_mask,
                       AttentionDims dims, float dropout_p, RngKey rng) {
  attention_forward_t(out, probs, qkv, key_mask, dims, dropout_p, rng);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const int32_t* key_mask, AttentionDims dims, float dropout_p, RngKey rng,
                        float* workspace, int64_t workspace_floats) {
  attention_backward_t(dqkv, dout, qkv, probs, key_mask, dims, dropout_p, rng, workspace,
                       workspace_floats);
}

void attention_forward_16(void* out, float* probs, const void* qkv, DType dtype,
                          const int32_t* key_mask, AttentionDims dims, float dropout_p,
                          RngKey rng) {
  with_float_type(dtype, out, [&](auto* o) {
    using S = std::remove_pointer_t<decltype(o)>;
    attention_forward_t(o, probs, static_cast<const S*>(qkv), key_mask, dims, dropout_p, rng);
  });
}

void attention_backward_16(void* dqkv, const void* dout, const void* qkv, DType dtype,
                           const float* probs, const int32_t* key_mask, AttentionDims dims,
                           float dropout_p, RngKey rng, float* workspace,
                           int64_t workspace_floats) {
  with_float_type(dtype, dqkv, [&](auto* d) {
    using S = std::remove_pointer_t<decltype(d)>;
    attention_backward_t(d, static_cast<const S*>(dout), static_cast<const S*>(qkv), probs,
                         key_mask, dims, dropout_p, rng, workspace, workspace_floats);
  });
}

}  // namespace ftune::cuda
