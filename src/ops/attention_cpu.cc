// Attention on the CPU. Work is split over (batch, head) pairs; each thread copies its head's K
// and V into its slice of the workspace in the layouts the inner loops want (K^T for scores, V^T
// for the backward's dP), so every inner loop runs over contiguous memory and vectorises:
//   scores:  s[j]  += q[d] * Kt[d][j]           (over j)
//   context: o[:]  += p'[j] * V[j][:]            (over d)
//   dP':     dp[j] += do[d] * Vt[d][j]           (over j)
//   dV, dK, dQ: rank-1 updates over d.
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "ops/attention.h"

namespace ftune::cpu {
namespace {

// Dropout multipliers for probs elements [base, base + n): keep / (1 - p) or 0. Drawn a Philox
// block (four elements) at a time, exactly as ops/dropout does for a flat tensor.
void dropout_row(float* m, RngKey rng, uint64_t base, int64_t n, float p) {
  const float scale = 1.0f / (1.0f - p);
  int64_t j = 0;
  while (j < n) {
    const uint64_t e = base + static_cast<uint64_t>(j);
    const Philox4 r = philox_block(rng, e >> 2);
    for (uint64_t k = e & 3; k < 4 && j < n; ++k, ++j) m[j] = philox_uniform(r.v[k]) >= p ? scale : 0.0f;
  }
}

// Runs fn(unit, thread_workspace) for every (batch, head) unit, one static block per thread.
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

}  // namespace

int64_t attention_workspace_per_thread(int64_t T, int64_t D) { return 4 * T * D + 3 * T; }

void attention_forward(float* out, float* probs, const float* qkv, const int32_t* key_mask,
                       AttentionDims dims, float dropout_p, RngKey rng, float* workspace) {
  const int64_t B = dims.B, T = dims.T, H = dims.H, D = dims.D, C = H * D, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for_each_head(B * H, workspace, attention_workspace_per_thread(T, D), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H;
    float* kt = ws;             // (D, T)
    float* v = kt + D * T;      // (T, D)
    float* s = v + T * D;       // (T)
    float* m = s + T;           // (T) dropout multipliers
    const float* base = qkv + b * T * C3;
    for (int64_t j = 0; j < T; ++j) {
      const float* kj = base + j * C3 + C + h * D;
      const float* vj = base + j * C3 + 2 * C + h * D;
      for (int64_t d = 0; d < D; ++d) {
        kt[d * T + j] = kj[d];
        v[j * D + d] = vj[d];
      }
    }
    const int32_t* mask = key_mask + b * T;
    bool any_key = false;
    for (int64_t j = 0; j < T; ++j) any_key |= mask[j] != 0;

    for (int64_t i = 0; i < T; ++i) {
      const float* q = base + i * C3 + h * D;
      for (int64_t j = 0; j < T; ++j) s[j] = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        const float qd = q[d];
        const float* ktd = kt + d * T;
        for (int64_t j = 0; j < T; ++j) s[j] += qd * ktd[j];
      }
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < T; ++j) {
        const bool attend = !any_key || mask[j] != 0;
        s[j] = attend ? s[j] * scale : -std::numeric_limits<float>::infinity();
        mx = std::max(mx, s[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < T; ++j) {
        const float e = any_key ? std::exp(s[j] - mx) : 1.0f;  // exp(-inf) = 0 for padding keys
        s[j] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
      float* prow = probs + (u * T + i) * T;
      for (int64_t j = 0; j < T; ++j) prow[j] = s[j] * inv;

      if (dropout_p > 0.0f) dropout_row(m, rng, static_cast<uint64_t>((u * T + i) * T), T, dropout_p);
      float* o = out + (b * T + i) * C + h * D;
      for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
      for (int64_t j = 0; j < T; ++j) {
        const float pj = dropout_p > 0.0f ? prow[j] * m[j] : prow[j];
        if (pj == 0.0f) continue;
        const float* vj = v + j * D;
        for (int64_t d = 0; d < D; ++d) o[d] += pj * vj[d];
      }
    }
  });
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const int32_t* key_mask, AttentionDims dims, float dropout_p, RngKey rng,
                        float* workspace) {
  (void)key_mask;  // padding keys have probability 0, so they receive no gradient through P
  const int64_t B = dims.B, T = dims.T, H = dims.H, D = dims.D, C = H * D, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for_each_head(B * H, workspace, attention_workspace_per_thread(T, D), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H;
    float* vt = ws;             // (D, T)
    float* dk = vt + D * T;     // (T, D)
    float* dv = dk + T * D;     // (T, D)
    float* k = dv + T * D;      // (T, D)
    float* dp = k + T * D;      // (T)
    float* m = dp + T;          // (T)
    const float* base = qkv + b * T * C3;
    for (int64_t j = 0; j < T; ++j) {
      const float* kj = base + j * C3 + C + h * D;
      const float* vj = base + j * C3 + 2 * C + h * D;
      for (int64_t d = 0; d < D; ++d) {
        k[j * D + d] = kj[d];
        vt[d * T + j] = vj[d];
        dk[j * D + d] = 0.0f;
        dv[j * D + d] = 0.0f;
      }
    }
    for (int64_t i = 0; i < T; ++i) {
      const float* q = base + i * C3 + h * D;
      const float* dov = dout + (b * T + i) * C + h * D;
      const float* prow = probs + (u * T + i) * T;
      if (dropout_p > 0.0f) dropout_row(m, rng, static_cast<uint64_t>((u * T + i) * T), T, dropout_p);
      // dP'[j] = dO . V[j]
      for (int64_t j = 0; j < T; ++j) dp[j] = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        const float g = dov[d];
        const float* vtd = vt + d * T;
        for (int64_t j = 0; j < T; ++j) dp[j] += g * vtd[j];
      }
      // dV[j] += P'[j] dO;  dP = dP' * mask;  softmax backward needs sum_j P[j] dP[j]
      float dot = 0.0f;
      for (int64_t j = 0; j < T; ++j) {
        const float pj = prow[j];
        if (pj == 0.0f) continue;
        const float mj = dropout_p > 0.0f ? m[j] : 1.0f;
        const float pdrop = pj * mj;
        if (pdrop != 0.0f) {
          float* dvj = dv + j * D;
          for (int64_t d = 0; d < D; ++d) dvj[d] += pdrop * dov[d];
        }
        dp[j] *= mj;
        dot += pj * dp[j];
      }
      // dS[j] = P[j] (dP[j] - dot); dQ = scale * dS K; dK[j] += scale * dS[j] q
      float* dq = dqkv + (b * T + i) * C3 + h * D;
      for (int64_t d = 0; d < D; ++d) dq[d] = 0.0f;
      for (int64_t j = 0; j < T; ++j) {
        const float pj = prow[j];
        if (pj == 0.0f) continue;
        const float ds = pj * (dp[j] - dot) * scale;
        const float* kj = k + j * D;
        float* dkj = dk + j * D;
        for (int64_t d = 0; d < D; ++d) {
          dq[d] += ds * kj[d];
          dkj[d] += ds * q[d];
        }
      }
    }
    for (int64_t j = 0; j < T; ++j) {
      float* dkj = dqkv + (b * T + j) * C3 + C + h * D;
      float* dvj = dqkv + (b * T + j) * C3 + 2 * C + h * D;
      for (int64_t d = 0; d < D; ++d) {
        dkj[d] = dk[j * D + d];
        dvj[d] = dv[j * D + d];
      }
    }
  });
}

}  // namespace ftune::cpu
