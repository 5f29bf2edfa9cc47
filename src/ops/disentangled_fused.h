// The fused disentangled-attention path's host side (ops/disentangled_tiles.h has the blocks): the
// per-head GEMMs around the tile kernels, in the order the CUDA backend runs them. A template over
// the backend that runs GEMMs, zeroes memory and launches the blocks: CUDA
// (ops/disentangled_attention_cuda.cu) and the host emulation the tests run on the CPU
// (tests/ops/disentangled_fused_emulation_test.cc), so both follow one sequence.
//   forward:  C2P_h = c Q_h PK_h^T, P2C_h = c K_h PQ_h^T (rows [rlo, rhi) of the embeddings);
//             forward blocks (out, lse, O)
//   backward: the same products; dC2P, dP2C zeroed; dq blocks, then dkv blocks;
//             dq_h += c dC2P_h PK_h;  dk_h += c dP2C_h PQ_h;  dPK_h = c dC2P_h^T Q_h;
//             dPQ_h = c dP2C_h^T K_h (rows outside [rlo, rhi) zero)
// Backend: gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) as
// ops/primitives_cpu.h's; zero_rows(p, ld, cols, rows); blocks(kind, args, ptrs, tile, grid_x =
// B H, grid_y = tiles).
#pragma once

#include "ops/disentangled_tiles.h"

namespace ftune::disentangled {

inline int64_t tiles_over(int64_t T, int64_t tile) { return (T + tile - 1) / tile; }

template <class Backend>
void fused_products(Backend& be, const DisentangledArgs& a, const FusedLayout& L, const float* q,
                    const float* k, const float* pk, const float* pq, float* ws) {
  const int64_t H = a.spec.heads, D = a.spec.head_dim, BT = a.B * a.T;
  for (int64_t h = 0; h < H; ++h) {
    if (a.spec.c2p)
      be.gemm(false, true, BT, L.W, D, a.scale, q + h * D, a.ldq, pk + a.rlo * a.ldpk + h * D,
              a.ldpk, 0.0f, ws + L.c2p + h * BT * L.Wp, L.Wp);
    if (a.spec.p2c)
      be.gemm(false, true, BT, L.W, D, a.scale, k + h * D, a.ldk, pq + a.rlo * a.ldpq + h * D,
              a.ldpq, 0.0f, ws + L.p2c + h * BT * L.Wp, L.Wp);
  }
}

// ws: the workspace after the relative-index table; saved: FusedLayout's saved floats.
template <class Backend>
void fused_forward(Backend& be, const DisentangledArgs& a, float* out, float* saved,
                   const float* q, const float* k, const float* v, const float* pk,
                   const float* pq, float* ws) {
  const FusedLayout L = fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, false);
  const int64_t tile = fused_tile(FusedKind::Forward, a.spec.head_dim);
  fused_products(be, a, L, q, k, pk, pq, ws);
  FusedPtrs t;
  t.q = q, t.k = k, t.v = v, t.c2p = ws + L.c2p, t.p2c = ws + L.p2c;
  t.out = out, t.lse = saved + L.lse, t.obuf = saved + L.obuf;
  t.Wp = L.Wp, t.rng = a.rng, t.row0 = a.row0;
  be.blocks(FusedKind::Forward, a, t, tile, a.B * a.spec.heads, tiles_over(a.T, tile));
}

template <class Backend>
void fused_backward(Backend& be, const DisentangledArgs& a, float* dq, float* dk, float* dv,
                    float* dpk, float* dpq, const float* dout, const float* q, const float* k,
                    const float* v, const float* pk, const float* pq, const float* saved,
                    float* ws) {
  const FusedLayout L = fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, true);
  const int64_t H = a.spec.heads, D = a.spec.head_dim, C = H * D, BT = a.B * a.T;
  const int64_t R = 2 * a.spec.span(), prod = H * BT * L.Wp;
  fused_products(be, a, L, q, k, pk, pq, ws);
  if (a.spec.c2p) be.zero_rows(ws + L.dc2p, prod, prod, 1);
  if (a.spec.p2c) be.zero_rows(ws + L.dp2c, prod, prod, 1);
  FusedPtrs t;
  t.q = q, t.k = k, t.v = v, t.dout = dout, t.c2p = ws + L.c2p, t.p2c = ws + L.p2c;
  t.lse = const_cast<float*>(saved + L.lse), t.obuf = const_cast<float*>(saved + L.obuf);
  t.dq = dq, t.dk = dk, t.dv = dv, t.dc2p = ws + L.dc2p, t.dp2c = ws + L.dp2c;
  t.delta = ws + L.delta;
  t.Wp = L.Wp, t.rng = a.rng, t.row0 = a.row0;
  const int64_t tq = fused_tile(FusedKind::Dq, D), tkv = fused_tile(FusedKind::Dkv, D);
  be.blocks(FusedKind::Dq, a, t, tq, a.B * H, tiles_over(a.T, tq));
  be.blocks(FusedKind::Dkv, a, t, tkv, a.B * H, tiles_over(a.T, tkv));
  // A position term: content gradient += c dG PE; dPE = c dG^T content (rows in reach).
  auto term = [&](const float* dg, const float* content, int64_t ldc, float* dcontent,
                  int64_t lddc, const float* pos, int64_t ldp, float* dpos, int64_t lddp) {
    for (int64_t h = 0; h < H; ++h) {
      const float* dgh = dg + h * BT * L.Wp;
      be.gemm(false, false, BT, D, L.W, a.scale, dgh, L.Wp, pos + a.rlo * ldp + h * D, ldp, 1.0f,
              dcontent + h * D, lddc);
      be.gemm(true, false, L.W, D, BT, a.scale, dgh, L.Wp, content + h * D, ldc, 0.0f,
              dpos + a.rlo * lddp + h * D, lddp);
    }
    be.zero_rows(dpos, lddp, C, a.rlo);
    be.zero_rows(dpos + a.rhi * lddp, lddp, C, R - a.rhi);
  };
  if (a.spec.c2p) term(t.dc2p, q, a.ldq, dq, a.lddq, pk, a.ldpk, dpk, a.lddpk);
  if (a.spec.p2c) term(t.dp2c, k, a.ldk, dk, a.lddk, pq, a.ldpq, dpq, a.lddpq);
}

}  // namespace ftune::disentangled
