// Attention on CUDA (ops/attention.h's contract; fp32, or bf16 / f16 storage under mixed
// precision: q, k, v, out, dout, dq, dk, dv of storage type S, every product, the softmax and the
// probabilities in fp32): ftune's own kernel, the twin of ops/attention_cpu.cc (same layouts,
// visibility rule, dropout streams and gradient rule: dq, dk, dv are overwritten).
// One block of kThreads threads per query row (b, h, i) or key row (b, g, j); each thread takes
// keys (or queries) t, t + kThreads, ... for the scores and head-dimension elements
// d = t, t + kThreads, ... for the products with V, K or Q, each summed serially in index order.
// No float atomics anywhere: the same inputs give the same bits on every run.
//   forward (per query row i of head h; kv head g = h / (Hq / Hkv)):
//     s_ij = scale q_i . k_j (then softcap tanh(s / softcap));  P_ij = masked softmax over the
//     visible keys [lo, hi) (fast_exp, as the CPU), or 1 / len over the sequence when none is;
//     P'_ij = P_ij m_ij (m from Philox at the stream index of ops/attention.h);
//     out_i = sum_j P'_ij v_j.
//   backward, pass 1 (per query row i):
//     dP_ij = m_ij (dO_i . v_j);  r_i = sum_j P_ij dP_ij;  dS_ij = P_ij (dP_ij - r_i)
//     (x (1 - tanh^2) with softcap);  dq_i = scale sum_j dS_ij k_j;  r_i kept in the workspace.
//   backward, pass 2 (per key row j of kv head g, over the group's query heads h in order and
//   every query row i that may see j):
//     dv_j = sum_h sum_i P'_ij dO_i;  dk_j = scale sum_h sum_i dS_ij q_i  (dS_ij rebuilt from r_i),
//     accumulated in fp32 in shared memory and stored once (grouped-query attention: no races).
// Limits: shared memory per block of (D + T) floats forward, (2D + T) and (4D + 2T) backward must
// fit 47 KiB (T = 512, D = 64: 5 KiB; T up to ~5,800 at D = 64, a ShapeError beyond). The
// backward pass keeps Hq T floats of row sums per sequence in the caller's workspace and walks the
// sequences in chunks of floor(workspace / (Hq T)); the forward pass reads none.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/element.cuh"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "ops/attention.h"
#include "ops/fast_math.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kThreads = 128;
// Dynamic shared memory per block: the default 48 KiB limit less room for the static reduction
// scratch (no opt-in attribute needed on any architecture).
constexpr size_t kMaxSharedBytes = 47 * 1024;

// Keys [0, L) of a sequence of len tokens hold every real one (L = 0: all padding; L = len
// without a mask). Every thread gets L.
__device__ int64_t attended_keys(const int32_t* mask, int64_t len, int* shared) {
  if (mask == nullptr) return len;
  if (threadIdx.x == 0) *shared = 0;
  __syncthreads();
  int last = 0;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
    if (mask[j] != 0) last = static_cast<int>(j) + 1;
  if (last > 0) atomicMax(shared, last);  // integer maximum: the same result in any order
  __syncthreads();
  return *shared;
}

// The keys [lo, hi) query i sees by position, cut at the last real key L.
__device__ void visible_range(const AttentionArgs& a, int64_t i, int64_t len, int64_t L,
                              int64_t* lo, int64_t* hi) {
  a.key_range(i, len, lo, hi);
  if (*hi > L) *hi = L;
  if (*hi < *lo) *hi = *lo;
}

// Whether query row i sees any key in [lo, hi) (a real one, with a key mask). Every thread gets it.
__device__ bool sees_a_key(const int32_t* mask, int64_t lo, int64_t hi, float* red) {
  if (mask == nullptr) return hi > lo;
  float seen = 0.0f;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
    if (mask[j] != 0) seen = 1.0f;
  return block_max(seen, red) > 0.0f;
}

// The dropout multiplier of stream element e, as cpu::dropout_multipliers computes it.
__device__ float keep_multiplier(RngKey rng, uint64_t e, float p, float inv_keep) {
  return philox_uniform_at(rng, e) >= p ? inv_keep : 0.0f;
}

template <typename S>
__device__ float dot(const float* x, const S* y, int64_t D) {
  float s = 0.0f;
  for (int64_t c = 0; c < D; ++c) s += x[c] * load_f32(y + c);
  return s;
}

// Grid: B * Hq * T blocks, block (b * Hq + h) * T + i. Shared: q_i (D), then the row (T).
template <typename S>
__global__ void attention_forward_kernel(AttentionArgs a, S* out, float* probs, const S* q,
                                         const S* k, const S* v) {
  uint64_t row0 = a.row0;
  RngKey rng = a.rng;
  resolve_micro(rng, row0);  // a captured graph's micro-batch place, read at replay
  extern __shared__ float sh[];
  __shared__ float red[32];
  __shared__ int last_key;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t i = blockIdx.x % T, u = blockIdx.x / T, b = u / H, h = u % H, g = h / a.group();
  const int64_t start = a.start(b), len = a.length(b);
  if (i >= len) return;  // varlen: past the end of a shorter sequence (the whole block leaves)
  const int32_t* mask = a.key_mask ? a.key_mask + start : nullptr;
  const S* qi = q + (start + i) * a.ldq + h * D;
  const S* kg = k + start * a.ldk + g * D;  // key j at kg + j * ldk
  const S* vg = v + start * a.ldv + g * D;
  float* qs = sh;
  float* w = sh + D;
  const int64_t L = attended_keys(mask, len, &last_key);
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) qs[c] = load_f32(qi + c);
  __syncthreads();

  int64_t lo, hi;
  visible_range(a, i, len, L, &lo, &hi);
  const float cap = a.spec.softcap;
  float mx = -INFINITY;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    float s = a.spec.scale * dot(qs, kg + j * a.ldk, D);
    if (cap > 0.0f) s = cap * tanhf(s / cap);
    w[j] = s;
    if (!mask || mask[j]) mx = fmaxf(mx, s);
  }
  const bool seen = sees_a_key(mask, lo, hi, red);
  int64_t jlo = lo, jhi = hi;  // the columns that may be nonzero
  if (seen) {
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
      sum += (w[j] = (!mask || mask[j]) ? fast_exp(w[j] - mx) : 0.0f);
    const float inv = 1.0f / block_sum(sum, red);
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) w[j] *= inv;
  } else {  // no key in sight: uniform over the sequence (HF's additive-mask result)
    jlo = 0;
    jhi = len;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) w[j] = 1.0f / static_cast<float>(len);
  }
  __syncthreads();
  float* P = probs + a.probs_row(start, len, h, i) * T;  // (T): zero outside [jlo, jhi)
  const float p = a.dropout_p, inv_keep = 1.0f / (1.0f - p);
  const uint64_t e0 = a.stream_row(row0, b, h, i);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const bool in = j >= jlo && j < jhi;
    const float pj = in ? w[j] : 0.0f;
    P[j] = pj;
    if (in && p > 0.0f) w[j] = pj * keep_multiplier(rng, e0 + j, p, inv_keep);
  }
  __syncthreads();
  S* o = out + (start + i) * a.ldo + h * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = jlo; j < jhi; ++j) acc += w[j] * load_f32(vg + j * a.ldv + c);
    store_f32(o + c, acc);
  }
}

// Backward pass 1 for the sequences [b0, b0 + n). Grid: n * Hq * T blocks, block
// ((b - b0) * Hq + h) * T + i. Writes dq_i and r_i = sum_j P_ij dP_ij into
// rsum[probs_row(b, h, i) - start(b0) Hq]. Shared: dO_i (D), q_i (D, softcap), dS (T).
template <typename S>
__global__ void attention_dq_kernel(AttentionArgs a, int64_t b0, S* dq, float* rsum,
                                    const S* dout, const S* q, const S* k, const S* v,
                                    const float* probs) {
  uint64_t row0 = a.row0;
  RngKey rng = a.rng;
  resolve_micro(rng, row0);  // a captured graph's micro-batch place, read at replay
  extern __shared__ float sh[];
  __shared__ float red[32];
  __shared__ int last_key;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim;
  const int64_t i = blockIdx.x % T, u = blockIdx.x / T, b = b0 + u / H, h = u % H;
  const int64_t g = h / a.group();
  const int64_t start = a.start(b), len = a.length(b);
  if (i >= len) return;
  const int32_t* mask = a.key_mask ? a.key_mask + start : nullptr;
  const int64_t L = attended_keys(mask, len, &last_key);
  const S* kg = k + start * a.ldk + g * D;
  const S* vg = v + start * a.ldv + g * D;
  const S* dO = dout + (start + i) * a.ldo + h * D;
  const S* qi = q + (start + i) * a.ldq + h * D;
  const int64_t prow = a.probs_row(start, len, h, i);
  const float* P = probs + prow * T;
  float* dos = sh;
  float* qs = sh + D;
  float* ds = sh + 2 * D;
  const float cap = a.spec.softcap;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    dos[c] = load_f32(dO + c);
    if (cap > 0.0f) qs[c] = load_f32(qi + c);
  }
  __syncthreads();

  int64_t jlo, jhi;
  visible_range(a, i, len, L, &jlo, &jhi);
  if (!sees_a_key(mask, jlo, jhi, red)) jlo = 0, jhi = len;  // the uniform row
  const float p = a.dropout_p, inv_keep = 1.0f / (1.0f - p);
  const uint64_t e0 = a.stream_row(row0, b, h, i);
  float r = 0.0f;
  for (int64_t j = jlo + threadIdx.x; j < jhi; j += blockDim.x) {
    float dp = dot(dos, vg + j * a.ldv, D);
    if (p > 0.0f) dp *= keep_multiplier(rng, e0 + j, p, inv_keep);
    ds[j] = dp;
    r += P[j] * dp;
  }
  r = block_sum(r, red);
  for (int64_t j = jlo + threadIdx.x; j < jhi; j += blockDim.x) {
    float d = P[j] * (ds[j] - r);
    if (cap > 0.0f) {  // through s = cap tanh(x / cap): ds/dx = 1 - (s / cap)^2
      const float t = tanhf(a.spec.scale * dot(qs, kg + j * a.ldk, D) / cap);
      d *= 1.0f - t * t;
    }
    ds[j] = d;
  }
  if (threadIdx.x == 0) rsum[prow - a.start(b0) * H] = r;
  __syncthreads();
  S* dqi = dq + (start + i) * a.lddq + h * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = jlo; j < jhi; ++j) acc += ds[j] * load_f32(kg + j * a.ldk + c);
    store_f32(dqi + c, a.spec.scale * acc);
  }
}

// Backward pass 2 for the sequences [b0, b0 + n). Grid: n * Hkv * T blocks, block
// ((b - b0) * Hkv + g) * T + j for key j of kv head g. Shared: v_j and k_j (D each), P'_ij and
// dS_ij of one query head (T each), the fp32 sums of dv_j and dk_j over the group (D each).
template <typename S>
__global__ void attention_dkv_kernel(AttentionArgs a, int64_t b0, S* dk, S* dv, const float* rsum,
                                     const S* dout, const S* q, const S* k, const S* v,
                                     const float* probs) {
  uint64_t row0 = a.row0;
  RngKey rng = a.rng;
  resolve_micro(rng, row0);  // a captured graph's micro-batch place, read at replay
  extern __shared__ float sh[];
  __shared__ int last_key;
  const int64_t T = a.T, H = a.spec.heads, Hkv = a.spec.kv_heads, D = a.spec.head_dim;
  const int64_t G = a.group();
  const int64_t j = blockIdx.x % T, u = blockIdx.x / T, b = b0 + u / Hkv, g = u % Hkv;
  const int64_t start = a.start(b), len = a.length(b);
  if (j >= len) return;
  const int32_t* mask = a.key_mask ? a.key_mask + start : nullptr;
  const int64_t L = attended_keys(mask, len, &last_key);
  S* dkj = dk + (start + j) * a.lddk + g * D;
  S* dvj = dv + (start + j) * a.lddv + g * D;
  const bool plain = !a.spec.causal && a.spec.window.left < 0 && a.spec.window.right < 0;
  if (mask && plain && L > 0 && j >= L) {
    // Past the last real key, and every query sees key L - 1: no probability, no gradient.
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
      store_f32(dkj + c, 0.0f);
      store_f32(dvj + c, 0.0f);
    }
    return;
  }
  // The queries that may put weight on key j: by position, or (with a key mask, whose rows may
  // see no key and attend uniformly) all of them.
  int64_t ilo = 0, ihi = len;
  if (!mask) a.query_range(j, len, &ilo, &ihi);
  const S* vj = v + (start + j) * a.ldv + g * D;
  const S* kj = k + (start + j) * a.ldk + g * D;
  const int64_t r0 = a.start(b0) * H;
  float* vs = sh;
  float* ks = sh + D;
  float* acc_v = sh + 2 * D;
  float* acc_k = sh + 3 * D;
  float* pd = sh + 4 * D;
  float* ds = sh + 4 * D + T;
  const float cap = a.spec.softcap;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    vs[c] = load_f32(vj + c);
    ks[c] = load_f32(kj + c);
  }
  const float p = a.dropout_p, inv_keep = 1.0f / (1.0f - p);
  for (int64_t h = g * G; h < (g + 1) * G; ++h) {
    const S* qh = q + start * a.ldq + h * D;      // query i at qh + i * ldq
    const S* dO = dout + start * a.ldo + h * D;   // dO_i at dO + i * ldo
    __syncthreads();  // vs, ks written; pd, ds of the previous head read
    for (int64_t i = ilo + threadIdx.x; i < ihi; i += blockDim.x) {
      const float dp = dot(vs, dO + i * a.ldo, D);
      const float m =
          p > 0.0f ? keep_multiplier(rng, a.stream_row(row0, b, h, i) + j, p, inv_keep) : 1.0f;
      const int64_t prow = a.probs_row(start, len, h, i);
      const float pij = probs[prow * T + j];
      pd[i] = pij * m;
      float d = pij * (dp * m - rsum[prow - r0]);
      if (cap > 0.0f) {
        const float t = tanhf(a.spec.scale * dot(ks, qh + i * a.ldq, D) / cap);
        d *= 1.0f - t * t;
      }
      ds[i] = d;
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
      float sv = 0.0f, sk = 0.0f;
      for (int64_t i = ilo; i < ihi; ++i) {
        sv += pd[i] * load_f32(dO + i * a.ldo + c);
        sk += ds[i] * load_f32(qh + i * a.ldq + c);
      }
      acc_v[c] = h == g * G ? sv : acc_v[c] + sv;  // each c belongs to one thread: no race
      acc_k[c] = h == g * G ? sk : acc_k[c] + sk;
    }
  }
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    store_f32(dvj + c, acc_v[c]);
    store_f32(dkj + c, a.spec.scale * acc_k[c]);
  }
}

size_t shared_bytes(const char* op, const AttentionArgs& a, int64_t d_rows, int64_t t_rows) {
  const size_t bytes = static_cast<size_t>(d_rows * a.spec.head_dim + t_rows * a.T) * sizeof(float);
  if (bytes > kMaxSharedBytes)
    throw ShapeError(std::string(op) + " (CUDA): sequence length " + std::to_string(a.T) +
                     " with head size " + std::to_string(a.spec.head_dim) + " needs " +
                     std::to_string(bytes) + " bytes of shared memory per block, more than the " +
                     std::to_string(kMaxSharedBytes) +
                     " ftune's kernel uses (shorten max_length, or use cuDNN attention)");
  return bytes;
}

unsigned grid(int64_t blocks) {
  if (blocks > 0x7fffffff)
    throw ShapeError("attention (CUDA): " + std::to_string(blocks) + " blocks, over 2^31");
  return static_cast<unsigned>(blocks);
}

template <typename S>
void forward_t(const AttentionArgs& a, S* out, float* probs, const S* q, const S* k, const S* v) {
  const size_t shared = shared_bytes("attention_forward", a, 1, 1);
  const int64_t blocks = a.B * a.spec.heads * a.T;
  if (blocks == 0) return;
  attention_forward_kernel<<<grid(blocks), kThreads, shared, compute_stream()>>>(a, out, probs, q,
                                                                                k, v);
  FTUNE_CUDA_CHECK_LAUNCH();
}

template <typename S>
void backward_t(const AttentionArgs& a, S* dq, S* dk, S* dv, const S* dout, const S* q,
                const S* k, const S* v, const float* probs, float* workspace,
                int64_t workspace_floats) {
  const size_t shared_dq = shared_bytes("attention_backward", a, 2, 1);
  const size_t shared_dkv = shared_bytes("attention_backward", a, 4, 2);
  const int64_t H = a.spec.heads, T = a.T;
  if (a.B == 0 || T == 0) return;
  const int64_t chunk = workspace_floats / (H * T);  // sequences whose row sums fit
  if (chunk < 1)
    throw ShapeError("attention_backward (CUDA): workspace of " +
                     std::to_string(workspace_floats) + " floats, needs " +
                     std::to_string(H * T));
  for (int64_t b0 = 0; b0 < a.B; b0 += chunk) {
    const int64_t n = std::min(chunk, a.B - b0);
    attention_dq_kernel<<<grid(n * H * T), kThreads, shared_dq, compute_stream()>>>(
        a, b0, dq, workspace, dout, q, k, v, probs);
    FTUNE_CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<<<grid(n * a.spec.kv_heads * T), kThreads, shared_dkv,
                           compute_stream()>>>(a, b0, dk, dv, workspace, dout, q, k, v, probs);
    FTUNE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void attention_forward(const AttentionArgs& a, DType dtype, void* out, float* probs,
                       const void* q, const void* k, const void* v) {
  with_float_type(dtype, out, [&](auto* o) {
    using S = std::remove_pointer_t<decltype(o)>;
    forward_t(a, o, probs, static_cast<const S*>(q), static_cast<const S*>(k),
              static_cast<const S*>(v));
  });
}

void attention_backward(const AttentionArgs& a, DType dtype, void* dq, void* dk, void* dv,
                        const void* dout, const void* q, const void* k, const void* v,
                        const float* probs, float* workspace, int64_t workspace_floats) {
  with_float_type(dtype, dq, [&](auto* d) {
    using S = std::remove_pointer_t<decltype(d)>;
    backward_t(a, d, static_cast<S*>(dk), static_cast<S*>(dv), static_cast<const S*>(dout),
               static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v), probs,
               workspace, workspace_floats);
  });
}

}  // namespace ftune::cuda
