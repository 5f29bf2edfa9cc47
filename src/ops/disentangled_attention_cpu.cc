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
// Storage: fp32 tensors are read and written in place. A 16-bit tensor is read one (sequence,
// head) block at a time into the thread's workspace (exact), and an output block is rounded into
// its tensor once when the unit is done (the relative embeddings' gradients once per head, after
// the last sequence): the same fp32 arithmetic as on whole fp32 copies, in a workspace of a few
// (T, D) blocks per thread instead of copies of every tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "ops/cast.h"
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

// A block of `rows` rows of head h's D columns (from row r0) of a tensor of type t, row stride ld,
// as fp32: p with row stride ld.
struct Block {
  float* p;
  int64_t ld;
};

// Reads the block: in place when t is f32, else converted into buf (row stride D).
Block read_block(const void* src, DType t, int64_t ld, int64_t r0, int64_t rows, int64_t h,
                 int64_t D, float* buf) {
  const int64_t at = r0 * ld + h * D;
  if (t == DType::F32) return {const_cast<float*>(static_cast<const float*>(src)) + at, ld};
  const size_t es = dtype_size(t);
  for (int64_t r = 0; r < rows; ++r)
    cast(buf + r * D, DType::F32, static_cast<const char*>(src) + (at + r * ld) * es, t, D);
  return {buf, D};
}

// Where an output block is computed: in place when t is f32, else in buf (write_block rounds it
// into dst).
Block out_block(void* dst, DType t, int64_t ld, int64_t r0, int64_t h, int64_t D, float* buf) {
  if (t == DType::F32) return {static_cast<float*>(dst) + r0 * ld + h * D, ld};
  return {buf, D};
}
void write_block(void* dst, DType t, int64_t ld, int64_t r0, int64_t rows, int64_t h, int64_t D,
                 const Block& b) {
  if (t != DType::F32) store_f32(static_cast<char*>(dst) + (r0 * ld + h * D) * dtype_size(t), t,
                                 b.p, rows, D, ld);
}

// A sequence's content blocks (T, D) held per thread for 16-bit storage: forward q, k, v, out;
// backward q, k, v, dout, dq, dk, dv. Position blocks (W, D): pk, pq; backward also dpk, dpq.
int64_t staged_floats(const DisentangledArgs& a, bool backward) {
  if (a.storage == DType::F32) return 0;  // (the position tensors are f32 too)
  const int64_t TD = a.T * a.spec.head_dim, WD = reach_width(a) * a.spec.head_dim;
  return backward ? 7 * TD + 4 * WD : 4 * TD + 2 * WD;
}

}  // namespace

int64_t disentangled_workspace_per_thread(const DisentangledArgs& a, bool backward) {
  const int64_t T = a.T, W = reach_width(a);
  return 2 * T * T + 2 * T * W + T + staged_floats(a, backward);
}

void disentangled_attention_forward(const DisentangledArgs& args, void* out, float* probs,
                                    const void* q, const void* k, const void* v, const void* pk,
                                    const void* pq, float* workspace) {
  DisentangledArgs a = args;
  resolve_micro(a.rng, a.row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, W = reach_width(a);
  const float c = a.scale;
  const bool drop = a.dropout_p > 0.0f, c2p = a.spec.c2p, p2c = a.spec.p2c;
  const DType st = a.storage;
  for_each_unit(a.B * H, workspace, disentangled_workspace_per_thread(a, false), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H;
    float* P = probs + u * T * T;
    float* Pd = ws;                 // (T, T) dropped probabilities
    float* c2p_s = ws + T * T;      // (T, W)
    float* p2c_s = c2p_s + T * W;   // (T, W)
    float* m = p2c_s + T * W;       // (T) multipliers of one row
    float* blk = m + T;             // 16-bit storage: the unit's fp32 blocks
    const Block qh = read_block(q, st, a.ldq, b * T, T, h, D, blk);
    const Block kh = read_block(k, st, a.ldk, b * T, T, h, D, blk + T * D);
    const Block vh = read_block(v, st, a.ldv, b * T, T, h, D, blk + 2 * T * D);
    const Block oh = out_block(out, st, a.ldo, b * T, h, D, blk + 3 * T * D);
    float* pblk = blk + 4 * T * D;
    gemm(false, true, T, T, D, c, qh.p, qh.ld, kh.p, kh.ld, 0.0f, P, T);
    if (c2p) {
      const Block pkh = read_block(pk, a.pk_type, a.ldpk, a.rlo, W, h, D, pblk);
      gemm(false, true, T, W, D, c, qh.p, qh.ld, pkh.p, pkh.ld, 0.0f, c2p_s, W);
    }
    if (p2c) {
      const Block pqh = read_block(pq, a.pq_type, a.ldpq, a.rlo, W, h, D, pblk + W * D);
      gemm(false, true, T, W, D, c, kh.p, kh.ld, pqh.p, pqh.ld, 0.0f, p2c_s, W);
    }
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
    gemm(false, false, T, D, T, 1.0f, drop ? Pd : P, T, vh.p, vh.ld, 0.0f, oh.p, oh.ld);
    write_block(out, st, a.ldo, b * T, T, h, D, oh);
  });
}

void disentangled_attention_backward(const DisentangledArgs& args, void* dq, void* dk, void* dv,
                                     void* dpk, void* dpq, const void* dout, const void* q,
                                     const void* k, const void* v, const void* pk,
                                     const void* pq, const float* probs, float* workspace) {
  DisentangledArgs a = args;
  resolve_micro(a.rng, a.row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, W = reach_width(a);
  const int64_t R = 2 * a.spec.span();
  const float c = a.scale;
  const bool drop = a.dropout_p > 0.0f, c2p = a.spec.c2p, p2c = a.spec.p2c;
  const DType st = a.storage;
  for_each_unit(H, workspace, disentangled_workspace_per_thread(a, true), [&](int64_t h, float* ws) {
    float* dS = ws;                 // (T, T): dP', then the score gradients
    float* Pd = ws + T * T;         // (T, T): dropped probabilities
    float* dc2p = Pd + T * T;       // (T, W)
    float* dp2c = dc2p + T * W;     // (T, W)
    float* m = dp2c + T * W;        // (T)
    float* blk = m + T;             // 16-bit storage: the unit's fp32 blocks
    float* pblk = blk + 7 * T * D;
    // The head's position blocks, rows [rlo, rhi); their gradients sum over the sequences in
    // order (rows outside [rlo, rhi) are zero).
    const Block pkh = c2p ? read_block(pk, a.pk_type, a.ldpk, a.rlo, W, h, D, pblk) : Block{};
    const Block pqh = p2c ? read_block(pq, a.pq_type, a.ldpq, a.rlo, W, h, D, pblk + W * D) : Block{};
    const Block dpkh = out_block(dpk, a.dpk_type, a.lddpk, a.rlo, h, D, pblk + 2 * W * D);
    const Block dpqh = out_block(dpq, a.dpq_type, a.lddpq, a.rlo, h, D, pblk + 3 * W * D);
    auto zero_pos = [&](void* dpos, DType t, int64_t ld, const Block& acc) {
      for (int64_t r = 0; r < W; ++r) std::fill(acc.p + r * acc.ld, acc.p + r * acc.ld + D, 0.0f);
      if (t == DType::F32) {
        for (int64_t r = 0; r < R; ++r)
          if (r < a.rlo || r >= a.rhi)
            std::fill(static_cast<float*>(dpos) + r * ld + h * D,
                      static_cast<float*>(dpos) + r * ld + h * D + D, 0.0f);
        return;
      }
      for (int64_t r = 0; r < R; ++r)  // acc's first row is zero
        if (r < a.rlo || r >= a.rhi)
          store_f32(static_cast<char*>(dpos) + (r * ld + h * D) * dtype_size(t), t, acc.p, 1, D, ld);
    };
    if (c2p) zero_pos(dpk, a.dpk_type, a.lddpk, dpkh);
    if (p2c) zero_pos(dpq, a.dpq_type, a.lddpq, dpqh);
    for (int64_t b = 0; b < a.B; ++b) {
      const Block qh = read_block(q, st, a.ldq, b * T, T, h, D, blk);
      const Block kh = read_block(k, st, a.ldk, b * T, T, h, D, blk + T * D);
      const Block vh = read_block(v, st, a.ldv, b * T, T, h, D, blk + 2 * T * D);
      const Block dO = read_block(dout, st, a.ldo, b * T, T, h, D, blk + 3 * T * D);
      const Block dqh = out_block(dq, st, a.lddq, b * T, h, D, blk + 4 * T * D);
      const Block dkh = out_block(dk, st, a.lddk, b * T, h, D, blk + 5 * T * D);
      const Block dvh = out_block(dv, st, a.lddv, b * T, h, D, blk + 6 * T * D);
      const float* P = probs + (b * H + h) * T * T;
      gemm(false, true, T, T, D, 1.0f, dO.p, dO.ld, vh.p, vh.ld, 0.0f, dS, T);
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
      gemm(true, false, T, D, T, 1.0f, drop ? Pd : P, T, dO.p, dO.ld, 0.0f, dvh.p, dvh.ld);
      gemm(false, false, T, D, T, 1.0f, dS, T, kh.p, kh.ld, 0.0f, dqh.p, dqh.ld);
      gemm(true, false, T, D, T, 1.0f, dS, T, qh.p, qh.ld, 0.0f, dkh.p, dkh.ld);
      // A position term's backward: dG[x, r'] sums dS over the pairs (i, j) reading r', x = i
      // (c2p: the query's row) or j (p2c: the key's); d(content) += dG PE, dPE += dG^T content.
      auto term = [&](bool by_query, float* dg, const Block& content, const Block& dcontent,
                      const Block& pos, const Block& dpos) {
        std::memset(dg, 0, sizeof(float) * T * W);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) dg[(by_query ? i : j) * W + a.rel(i, j) - a.rlo] += dS[i * T + j];
        gemm(false, false, T, D, W, 1.0f, dg, W, pos.p, pos.ld, 1.0f, dcontent.p, dcontent.ld);
        gemm(true, false, W, D, T, 1.0f, dg, W, content.p, content.ld, 1.0f, dpos.p, dpos.ld);
      };
      if (c2p) term(true, dc2p, qh, dqh, pkh, dpkh);
      if (p2c) term(false, dp2c, kh, dkh, pqh, dpqh);
      write_block(dq, st, a.lddq, b * T, T, h, D, dqh);
      write_block(dk, st, a.lddk, b * T, T, h, D, dkh);
      write_block(dv, st, a.lddv, b * T, T, h, D, dvh);
    }
    if (c2p) write_block(dpk, a.dpk_type, a.lddpk, a.rlo, W, h, D, dpkh);
    if (p2c) write_block(dpq, a.dpq_type, a.lddpq, a.rlo, W, h, D, dpqh);
  });
}

}  // namespace ftune::cpu
