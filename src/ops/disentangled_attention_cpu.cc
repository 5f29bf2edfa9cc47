// Disentangled attention on the CPU (the contract of ops/disentangled_attention.h). For one
// sequence and head, with W = rhi - rlo relative indices in reach and r' = r(i, j) - rlo:
//   forward:  S = c Q K^T;  C2P = c Q PK[rlo:rhi]^T (T, W);  P2C = c K PQ[rlo:rhi]^T (T, W);
//             S_ij += C2P[i, r'] + P2C[j, r'];  P = masked softmax (saved);  O = dropout(P) V
//   backward: dP' = dO V^T;  dV = P'^T dO;  dS = c P (dP - rowsum(P dP)) (0 on padding queries);
//             dQ = dS K + dC2P PK;  dK = dS^T Q + dP2C PQ  with dC2P[i, r'] = sum_j dS_ij,
//             dP2C[j, r'] = sum_i dS_ij;  dPK += dC2P^T Q;  dPQ += dP2C^T K
// The forward pass runs one (sequence, head) unit per task; the backward pass one head per task,
// its sequences in order, so the relative embeddings' gradients sum without races, in a fixed
// order. The GEMMs are single-threaded OpenBLAS calls on the calling thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "ops/disentangled_attention.h"
#include "ops/fast_math.h"
#include "ops/primitives_cpu.h"

namespace ftune::cpu {
namespace {

// Row i of P from its scores: softmax over the sequence's real keys for a real query, uniform
// over all T for a padding one (HF's all-masked row).
void softmax_row(const DisentangledArgs& a, int64_t b, int64_t i, float* row) {
  const int64_t T = a.T;
  if (!a.real(b, i)) {
    for (int64_t j = 0; j < T; ++j) row[j] = 1.0f / static_cast<float>(T);
    return;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < T; ++j)
    if (a.real(b, j)) mx = std::max(mx, row[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < T; ++j) sum += (row[j] = a.real(b, j) ? fast_exp(row[j] - mx) : 0.0f);
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < T; ++j) row[j] *= inv;
}

int64_t reach_width(const DisentangledArgs& a) { return a.rhi - a.rlo; }

}  // namespace

int64_t disentangled_workspace_per_thread(const DisentangledArgs& a) {
  const int64_t T = a.T, W = reach_width(a);
  return 2 * T * T + 2 * T * W + T;
}

void disentangled_attention_forward(const DisentangledArgs& args, float* out, float* probs,
                                    const float* q, const float* k, const float* v,
                                    const float* pk, const float* pq, float* workspace) {
  DisentangledArgs a = args;
  resolve_micro(a.rng, a.row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, W = reach_width(a);
  const float c = a.scale;
  const bool drop = a.dropout_p > 0.0f, c2p = a.spec.c2p, p2c = a.spec.p2c;
  for_each_unit(a.B * H, workspace, disentangled_workspace_per_thread(a), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H;
    const float* qh = q + b * T * a.ldq + h * D;
    const float* kh = k + b * T * a.ldk + h * D;
    const float* vh = v + b * T * a.ldv + h * D;
    float* P = probs + u * T * T;
    float* Pd = ws;                 // (T, T) dropped probabilities
    float* c2p_s = ws + T * T;      // (T, W)
    float* p2c_s = c2p_s + T * W;   // (T, W)
    float* m = p2c_s + T * W;       // (T) multipliers of one row
    gemm(false, true, T, T, D, c, qh, a.ldq, kh, a.ldk, 0.0f, P, T);
    if (c2p) gemm(false, true, T, W, D, c, qh, a.ldq, pk + a.rlo * a.ldpk + h * D, a.ldpk, 0.0f,
                  c2p_s, W);
    if (p2c) gemm(false, true, T, W, D, c, kh, a.ldk, pq + a.rlo * a.ldpq + h * D, a.ldpq, 0.0f,
                  p2c_s, W);
    for (int64_t i = 0; i < T; ++i) {
      float* row = P + i * T;
      for (int64_t j = 0; j < T; ++j) {
        const int64_t r = a.rel(i, j) - a.rlo;
        if (c2p) row[j] += c2p_s[i * W + r];
        if (p2c) row[j] += p2c_s[j * W + r];
      }
      softmax_row(a, b, i, row);
      if (drop) {
        dropout_multipliers(m, a.rng, a.stream_row(a.row0, b, h, i), T, a.dropout_p);
        for (int64_t j = 0; j < T; ++j) Pd[i * T + j] = row[j] * m[j];
      }
    }
    gemm(false, false, T, D, T, 1.0f, drop ? Pd : P, T, vh, a.ldv, 0.0f, out + b * T * a.ldo + h * D,
         a.ldo);
  });
}

void disentangled_attention_backward(const DisentangledArgs& args, float* dq, float* dk, float* dv,
                                     float* dpk, float* dpq, const float* dout, const float* q,
                                     const float* k, const float* v, const float* pk,
                                     const float* pq, const float* probs, float* workspace) {
  DisentangledArgs a = args;
  resolve_micro(a.rng, a.row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, W = reach_width(a);
  const int64_t R = 2 * a.spec.span();
  const float c = a.scale;
  const bool drop = a.dropout_p > 0.0f, c2p = a.spec.c2p, p2c = a.spec.p2c;
  for_each_unit(H, workspace, disentangled_workspace_per_thread(a), [&](int64_t h, float* ws) {
    float* dS = ws;                 // (T, T): dP', then the score gradients
    float* Pd = ws + T * T;         // (T, T): dropped probabilities
    float* dc2p = Pd + T * T;       // (T, W)
    float* dp2c = dc2p + T * W;     // (T, W)
    float* m = dp2c + T * W;        // (T)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < D; ++d) {
        if (c2p) dpk[r * a.lddpk + h * D + d] = 0.0f;
        if (p2c) dpq[r * a.lddpq + h * D + d] = 0.0f;
      }
    for (int64_t b = 0; b < a.B; ++b) {
      const float* qh = q + b * T * a.ldq + h * D;
      const float* kh = k + b * T * a.ldk + h * D;
      const float* vh = v + b * T * a.ldv + h * D;
      const float* dO = dout + b * T * a.ldo + h * D;
      float* dqh = dq + b * T * a.lddq + h * D;
      float* dkh = dk + b * T * a.lddk + h * D;
      float* dvh = dv + b * T * a.lddv + h * D;
      const float* P = probs + (b * H + h) * T * T;
      gemm(false, true, T, T, D, 1.0f, dO, a.ldo, vh, a.ldv, 0.0f, dS, T);
      for (int64_t i = 0; i < T; ++i) {
        const float* prow = P + i * T;
        float* drow = dS + i * T;
        if (drop) {
          dropout_multipliers(m, a.rng, a.stream_row(a.row0, b, h, i), T, a.dropout_p);
          for (int64_t j = 0; j < T; ++j) {
            Pd[i * T + j] = prow[j] * m[j];
            drow[j] *= m[j];
          }
        }
        if (!a.real(b, i)) {  // masked_fill: a padding query's scores get no gradient
          std::fill(drow, drow + T, 0.0f);
          continue;
        }
        float dot = 0.0f;
        for (int64_t j = 0; j < T; ++j) dot += prow[j] * drow[j];
        for (int64_t j = 0; j < T; ++j) drow[j] = c * prow[j] * (drow[j] - dot);
      }
      gemm(true, false, T, D, T, 1.0f, drop ? Pd : P, T, dO, a.ldo, 0.0f, dvh, a.lddv);
      gemm(false, false, T, D, T, 1.0f, dS, T, kh, a.ldk, 0.0f, dqh, a.lddq);
      gemm(true, false, T, D, T, 1.0f, dS, T, qh, a.ldq, 0.0f, dkh, a.lddk);
      // A position term's backward: dG[x, r'] sums dS over the pairs (i, j) reading r', x = i
      // (c2p: the query's row) or j (p2c: the key's); d(content) += dG PE, dPE += dG^T content.
      auto term = [&](bool by_query, float* dg, const float* content, int64_t ldc, float* dcontent,
                      int64_t lddc, const float* pos, int64_t ldp, float* dpos, int64_t lddp) {
        std::memset(dg, 0, sizeof(float) * T * W);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) dg[(by_query ? i : j) * W + a.rel(i, j) - a.rlo] += dS[i * T + j];
        gemm(false, false, T, D, W, 1.0f, dg, W, pos + a.rlo * ldp + h * D, ldp, 1.0f, dcontent, lddc);
        gemm(true, false, W, D, T, 1.0f, dg, W, content, ldc, 1.0f, dpos + a.rlo * lddp + h * D, lddp);
      };
      if (c2p) term(true, dc2p, qh, a.ldq, dqh, a.lddq, pk, a.ldpk, dpk, a.lddpk);
      if (p2c) term(false, dp2c, kh, a.ldk, dkh, a.lddk, pq, a.ldpq, dpq, a.lddpq);
    }
  });
}

}  // namespace ftune::cpu
