// Attention on the CPU. Work is split over (batch, head) pairs across the compute threads; each
// pair's matrix products are single-threaded OpenBLAS GEMMs reading Q, K, V and writing dQ, dK, dV
// in place through row strides (no gathering), so the inner work runs at BLAS speed:
//   forward:  S = scale Q K^T -> probs (masked softmax, in place);  P' = dropout(P);  O = P' V
//   backward: dP' = dO V^T;  dV = P'^T dO;  dS = P (dP - rowsum(P dP)) with dP = dP' * mask;
//             dQ = scale dS K;  dK = scale dS^T Q
// Keys after the last real token of a sequence are padding and have probability 0, so the GEMMs
// stop at that key (right-padded batches cost what their real lengths cost).
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/fast_math.h"
#include "ops/primitives_cpu.h"

namespace ftune::cpu {
namespace {

// Keys [0, L) hold every real token of sequence b; L = 0 when the sequence is all padding.
int64_t attended_keys(const int32_t* mask, int64_t T) {
  int64_t L = T;
  while (L > 0 && mask[L - 1] == 0) --L;
  return L;
}

// Runs fn(unit, thread_workspace) for every (batch, head) unit, one static block per thread (the
// GEMMs inside run on the calling thread).
template <typename Fn>
void for_each_head(int64_t units, float* workspace, int64_t per_thread, Fn fn) {
  const int threads = compute_threads();
  compute_pool().parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* ws = workspace + t * per_thread;
      for (int64_t u = units * t / threads; u < units * (t + 1) / threads; ++u) fn(u, ws);
    }
  });
}

// Stream index of element (b, h, i, 0) of the probabilities (see attention.h).
uint64_t stream_row(const AttentionDims& d, int64_t b, int64_t h, int64_t i) {
  const uint64_t Tv = static_cast<uint64_t>(d.Tv > 0 ? d.Tv : d.T);
  return (((d.row0 + static_cast<uint64_t>(b)) * d.H + h) * Tv + i) * Tv;
}

}  // namespace

// Per thread: the (T, keys) scores and dropped probabilities and one row of dropout multipliers;
// the head size does not enter (the GEMMs read Q, K, V in place).
int64_t attention_workspace_per_thread(int64_t T, int64_t D) {
  return 2 * T * T + T;
}

void attention_forward(float* out, float* probs, const float* qkv, const int32_t* key_mask,
                       AttentionDims dims, float dropout_p, RngKey rng, float* workspace) {
  resolve_micro(rng, dims.row0);
  const int64_t B = dims.B, T = dims.T, H = dims.H, D = dims.D, C = H * D, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for_each_head(B * H, workspace, attention_workspace_per_thread(T, D), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H;
    const int32_t* mask = key_mask + b * T;
    const int64_t L = attended_keys(mask, T);
    const int64_t keys = L > 0 ? L : T;  // an all-padding row attends uniformly to all keys (HF)
    const float* q = qkv + b * T * C3 + h * D;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* P = probs + u * T * T;  // (T, T), row stride T; columns >= keys stay 0
    float* Pd = ws;                // (T, keys) dropped probabilities
    float* m = ws + T * T;         // (keys) dropout multipliers of one row

    gemm(false, true, T, keys, D, scale, q, C3, k, C3, 0.0f, P, T);
    for (int64_t i = 0; i < T; ++i) {
      float* row = P + i * T;
      if (L > 0) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < keys; ++j)
          if (mask[j]) mx = std::max(mx, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j < keys; ++j) sum += (row[j] = mask[j] ? fast_exp(row[j] - mx) : 0.0f);
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < keys; ++j) row[j] *= inv;
      } else {
        for (int64_t j = 0; j < T; ++j) row[j] = 1.0f / static_cast<float>(T);
      }
      for (int64_t j = keys; j < T; ++j) row[j] = 0.0f;
      if (dropout_p > 0.0f) {
        dropout_multipliers(m, rng, stream_row(dims, b, h, i), keys, dropout_p);
        for (int64_t j = 0; j < keys; ++j) Pd[i * keys + j] = row[j] * m[j];
      }
    }
    const float* Pv = dropout_p > 0.0f ? Pd : P;
    gemm(false, false, T, D, keys, 1.0f, Pv, dropout_p > 0.0f ? keys : T, v, C3, 0.0f,
         out + b * T * C + h * D, C);
  });
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const int32_t* key_mask, AttentionDims dims, float dropout_p, RngKey rng,
                        float* workspace) {
  resolve_micro(rng, dims.row0);
  const int64_t B = dims.B, T = dims.T, H = dims.H, D = dims.D, C = H * D, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool drop = dropout_p > 0.0f;
  for_each_head(B * H, workspace, attention_workspace_per_thread(T, D), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H;
    const int64_t L = attended_keys(key_mask + b * T, T);
    const int64_t keys = L > 0 ? L : T;
    const float* q = qkv + b * T * C3 + h * D;
    const float* k = q + C;
    const float* v = q + 2 * C;
    const float* dO = dout + b * T * C + h * D;
    float* dq = dqkv + b * T * C3 + h * D;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* P = probs + u * T * T;
    float* dS = ws;             // (T, keys): dP' = dO V^T, turned into dS in place
    float* Pd = ws + T * T;     // (T, keys): dropped probabilities P'
    float* m = ws + 2 * T * T;  // (keys): dropout multipliers of one row

    gemm(false, true, T, keys, D, 1.0f, dO, C, v, C3, 0.0f, dS, keys);
    for (int64_t i = 0; i < T; ++i) {
      const float* prow = P + i * T;
      float* drow = dS + i * keys;
      if (drop) {
        dropout_multipliers(m, rng, stream_row(dims, b, h, i), keys, dropout_p);
        for (int64_t j = 0; j < keys; ++j) {
          Pd[i * keys + j] = prow[j] * m[j];
          drow[j] *= m[j];
        }
      }
      float dot = 0.0f;
      for (int64_t j = 0; j < keys; ++j) dot += prow[j] * drow[j];
      for (int64_t j = 0; j < keys; ++j) drow[j] = prow[j] * (drow[j] - dot);
    }
    // dV = P'^T dO, dQ = scale dS K, dK = scale dS^T Q; keys past `keys` are padding: zero.
    gemm(true, false, keys, D, T, 1.0f, drop ? Pd : P, drop ? keys : T, dO, C, 0.0f, dv, C3);
    gemm(false, false, T, D, keys, scale, dS, keys, k, C3, 0.0f, dq, C3);
    gemm(true, false, keys, D, T, scale, dS, keys, q, C3, 0.0f, dk, C3);
    for (int64_t j = keys; j < T; ++j)
      for (int64_t d = 0; d < D; ++d) dk[j * C3 + d] = dv[j * C3 + d] = 0.0f;
  });
}

}  // namespace ftune::cpu
