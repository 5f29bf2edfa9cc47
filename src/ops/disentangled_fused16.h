// The fused disentangled attention's host side for 16-bit storage (ops/disentangled_tiles16.h has
// the blocks): the sequence of ops/disentangled_fused.h with 16-bit operands, over a backend that
// runs GEMMs of 16-bit inputs with fp32 accumulation, casts, zeroes and launches the blocks: CUDA
// (ops/disentangled_attention_cuda.cu: cuBLASLt, WMMA blocks) and the host emulation the tests run
// (tests/ops/disentangled_fused_emulation_test.cc). S is bf16_t or f16_t.
//   forward:  C2P_h = c Q_h PK_h^T, P2C_h = c K_h PQ_h^T (16-bit in, fp32 out; rows [rlo, rhi));
//             forward blocks (out, lse, O)
//   backward: the same products; dC2P, dP2C (16-bit) zeroed; dq blocks, then dkv blocks (dv, and
//             the content gradients' tile parts dqf, dkf in fp32);
//             dqf += c dC2P_h PK_h;  dkf += c dP2C_h PQ_h  (16-bit in, fp32 accumulation);
//             dPK_h = c dC2P_h^T Q_h;  dPQ_h = c dP2C_h^T K_h  (rows outside [rlo, rhi) zero);
//             dq, dk = dqf, dkf rounded once.
// fp32 position tensors (allowed next to 16-bit storage) are rounded to S into the workspace first.
// Backend: gemm(ta, tb, M, N, K, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type, ldc);
// zero(p, type, ld, cols, rows); cast(dst, dst_type, ldd, src, src_type, lds, rows, cols);
// blocks16(kind, args, ptrs, tile, grid_x = B H, grid_y = tiles).
#pragma once

#include "ops/disentangled_fused.h"
#include "ops/disentangled_tiles16.h"

namespace ftune::disentangled {

// The 16-bit path's workspace after the relative-index table, in floats (16 bytes apart): C2P,
// P2C (fp32, (H, B T, Wp)); backward dC2P, dP2C (16-bit, (H, B T, Wh)), delta (B H T), dqf, dkf
// (fp32 (B T, C)); last the 16-bit copies of fp32 position tensors ((2S, C) each). Saved: as the
// fp32 path's (lse, O in fp32).
struct Fused16Layout {
  int64_t W = 0, Wp = 0, Wh = 0;
  int64_t c2p = 0, p2c = 0, dc2p = 0, dp2c = 0, delta = 0, dqf = 0, dkf = 0, pk16 = 0, pq16 = 0;
  int64_t workspace = 0;
};

inline Fused16Layout fused16_layout(const DisentangledSpec& s, int64_t B, int64_t T, int64_t rlo,
                                    int64_t rhi, bool backward) {
  auto r4 = [](int64_t floats) { return (floats + 3) / 4 * 4; };
  Fused16Layout L;
  L.W = rhi - rlo;
  L.Wp = (L.W + 3) / 4 * 4;
  L.Wh = (L.W + 7) / 8 * 8;
  const int64_t BT = B * T, C = s.heads * s.head_dim, prod = s.heads * BT * L.Wp;
  const int64_t prod16 = r4(s.heads * BT * L.Wh / 2), pos16 = r4((2 * s.span() * C + 1) / 2);
  int64_t at = 0;
  L.c2p = at, at += s.c2p ? prod : 0;
  L.p2c = at, at += s.p2c ? prod : 0;
  L.dc2p = at, at += backward && s.c2p ? prod16 : 0;
  L.dp2c = at, at += backward && s.p2c ? prod16 : 0;
  L.delta = at, at += backward ? r4(B * s.heads * T) : 0;
  L.dqf = at, at += backward ? r4(BT * C) : 0;
  L.dkf = at, at += backward ? r4(BT * C) : 0;
  L.pk16 = at, at += s.c2p ? pos16 : 0;
  L.pq16 = at, at += s.p2c ? pos16 : 0;
  L.workspace = at;
  return L;
}

// Whether the 16-bit blocks fit shared memory for head size D (else the op stages fp32 copies).
inline bool fused16_supported(int64_t D) {
  return fused16_tile(FusedKind::Forward, D) > 0 && fused16_tile(FusedKind::Dq, D) > 0 &&
         fused16_tile(FusedKind::Dkv, D) > 0;
}

// A position tensor as S: itself when it is of the storage type, else rows [rlo, rhi) rounded into
// the workspace at `copy` (row stride C). *ld receives its row stride.
template <class S, class Backend>
const S* pos16(Backend& be, const DisentangledArgs& a, const void* p, DType t, int64_t ld,
               float* copy, int64_t* out_ld) {
  constexpr DType st = dtype_of<S>::value;
  if (t == st) return *out_ld = ld, static_cast<const S*>(p);
  const int64_t C = a.spec.heads * a.spec.head_dim;
  S* c = reinterpret_cast<S*>(copy);
  be.cast(c + a.rlo * C, st, C, static_cast<const float*>(p) + a.rlo * ld, t, ld, a.rhi - a.rlo,
          C);
  *out_ld = C;
  return c;
}

template <class S, class Backend>
void fused16_products(Backend& be, const DisentangledArgs& a, const Fused16Layout& L, const S* q,
                      const S* k, const S* pk, int64_t ldpk, const S* pq, int64_t ldpq,
                      float* ws) {
  constexpr DType st = dtype_of<S>::value;
  const int64_t H = a.spec.heads, D = a.spec.head_dim, BT = a.B * a.T;
  for (int64_t h = 0; h < H; ++h) {
    if (a.spec.c2p)
      be.gemm(false, true, BT, L.W, D, a.scale, q + h * D, st, a.ldq, pk + a.rlo * ldpk + h * D,
              st, ldpk, 0.0f, ws + L.c2p + h * BT * L.Wp, DType::F32, L.Wp);
    if (a.spec.p2c)
      be.gemm(false, true, BT, L.W, D, a.scale, k + h * D, st, a.ldk, pq + a.rlo * ldpq + h * D,
              st, ldpq, 0.0f, ws + L.p2c + h * BT * L.Wp, DType::F32, L.Wp);
  }
}

template <class S, class Backend>
void fused16_forward(Backend& be, const DisentangledArgs& a, S* out, float* saved, const S* q,
                     const S* k, const S* v, const void* pk, const void* pq, float* ws) {
  const Fused16Layout L = fused16_layout(a.spec, a.B, a.T, a.rlo, a.rhi, false);
  const FusedLayout F = fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, false);
  int64_t ldpk = 0, ldpq = 0;
  const S* pk16 = a.spec.c2p ? pos16<S>(be, a, pk, a.pk_type, a.ldpk, ws + L.pk16, &ldpk) : nullptr;
  const S* pq16 = a.spec.p2c ? pos16<S>(be, a, pq, a.pq_type, a.ldpq, ws + L.pq16, &ldpq) : nullptr;
  fused16_products(be, a, L, q, k, pk16, ldpk, pq16, ldpq, ws);
  Fused16Ptrs<S> t;
  t.base.c2p = ws + L.c2p, t.base.p2c = ws + L.p2c, t.base.Wp = L.Wp;
  t.base.lse = saved + F.lse, t.base.obuf = saved + F.obuf;
  t.base.rng = a.rng, t.base.row0 = a.row0;
  t.q = q, t.k = k, t.v = v, t.out = out;
  const int64_t tile = fused16_tile(FusedKind::Forward, a.spec.head_dim);
  be.blocks16(FusedKind::Forward, a, t, tile, a.B * a.spec.heads, tiles_over(a.T, tile));
}

template <class S, class Backend>
void fused16_backward(Backend& be, const DisentangledArgs& a, S* dq, S* dk, S* dv, void* dpk,
                      void* dpq, const S* dout, const S* q, const S* k, const S* v,
                      const void* pk, const void* pq, const float* saved, float* ws) {
  constexpr DType st = dtype_of<S>::value;
  const Fused16Layout L = fused16_layout(a.spec, a.B, a.T, a.rlo, a.rhi, true);
  const FusedLayout F = fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, false);
  const int64_t H = a.spec.heads, D = a.spec.head_dim, C = H * D, BT = a.B * a.T;
  const int64_t R = 2 * a.spec.span();
  int64_t ldpk = 0, ldpq = 0;
  const S* pk16 = a.spec.c2p ? pos16<S>(be, a, pk, a.pk_type, a.ldpk, ws + L.pk16, &ldpk) : nullptr;
  const S* pq16 = a.spec.p2c ? pos16<S>(be, a, pq, a.pq_type, a.ldpq, ws + L.pq16, &ldpq) : nullptr;
  fused16_products(be, a, L, q, k, pk16, ldpk, pq16, ldpq, ws);
  S* dc2p = reinterpret_cast<S*>(ws + L.dc2p);
  S* dp2c = reinterpret_cast<S*>(ws + L.dp2c);
  if (a.spec.c2p) be.zero(dc2p, st, H * BT * L.Wh, H * BT * L.Wh, 1);
  if (a.spec.p2c) be.zero(dp2c, st, H * BT * L.Wh, H * BT * L.Wh, 1);
  Fused16Ptrs<S> t;
  t.base.c2p = ws + L.c2p, t.base.p2c = ws + L.p2c, t.base.Wp = L.Wp;
  t.base.lse = const_cast<float*>(saved + F.lse), t.base.obuf = const_cast<float*>(saved + F.obuf);
  t.base.delta = ws + L.delta;
  t.base.rng = a.rng, t.base.row0 = a.row0;
  t.q = q, t.k = k, t.v = v, t.dout = dout, t.dv = dv;
  t.dqf = ws + L.dqf, t.dkf = ws + L.dkf, t.dc2p = dc2p, t.dp2c = dp2c, t.Wh = L.Wh;
  const int64_t tq = fused16_tile(FusedKind::Dq, D), tkv = fused16_tile(FusedKind::Dkv, D);
  be.blocks16(FusedKind::Dq, a, t, tq, a.B * H, tiles_over(a.T, tq));
  be.blocks16(FusedKind::Dkv, a, t, tkv, a.B * H, tiles_over(a.T, tkv));
  // A position term: content gradient += c dG PE; dPE = c dG^T content (rows in reach).
  auto term = [&](const S* dg, const S* content, int64_t ldc, float* dcontent, const S* pos,
                  int64_t ldp, void* dpos, DType dpos_type, int64_t lddp) {
    char* dp = static_cast<char*>(dpos);
    const size_t es = dtype_size(dpos_type);
    for (int64_t h = 0; h < H; ++h) {
      const S* dgh = dg + h * BT * L.Wh;
      be.gemm(false, false, BT, D, L.W, a.scale, dgh, st, L.Wh, pos + a.rlo * ldp + h * D, st,
              ldp, 1.0f, dcontent + h * D, DType::F32, C);
      be.gemm(true, false, L.W, D, BT, a.scale, dgh, st, L.Wh, content + h * D, st, ldc, 0.0f,
              dp + (a.rlo * lddp + h * D) * es, dpos_type, lddp);
    }
    be.zero(dpos, dpos_type, lddp, C, a.rlo);
    be.zero(dp + a.rhi * lddp * es, dpos_type, lddp, C, R - a.rhi);
  };
  if (a.spec.c2p) term(dc2p, q, a.ldq, t.dqf, pk16, ldpk, dpk, a.dpk_type, a.lddpk);
  if (a.spec.p2c) term(dp2c, k, a.ldk, t.dkf, pq16, ldpq, dpq, a.dpq_type, a.lddpq);
  be.cast(dq, st, a.lddq, t.dqf, DType::F32, C, BT, C);
  be.cast(dk, st, a.lddk, t.dkf, DType::F32, C, BT, C);
}

}  // namespace ftune::disentangled
