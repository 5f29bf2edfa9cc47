// The fused disentangled attention's blocks for 16-bit storage (bf16, f16): the arithmetic of
// ops/disentangled_tiles.h (read that first: the same (b, h) tiles, online softmax, lse, delta,
// masks, dropout keyed alike, relative-position gathers and run-length position gradients, all in
// fp32), with the six tile products on tensor cores. q, k, v and dO are read as 16-bit into shared
// memory (no fp32 copies anywhere); each product runs as one warp-level phase of the Exec:
//   ex.mma(C, ldc, A, B, M, N, K, accumulate): C (M, N) fp32 [+]= A (M, K) B (K, N), A and B
//   16-bit in shared memory (MmaOperand: row- or column-major with a leading dimension), M, N, K
//   multiples of 16. CUDA: WMMA 16x16x16 fragments with fp32 accumulation, warps striding over the
//   16x16 output tiles; the host emulation: the same product in fp32 from the 16-bit values
//   (exact products, sums in k order).
// As flash attention does, P (after dropout) and dS are rounded to the storage type for their
// products (P V, P^T dO; dS K, dS^T Q); the row sums l, delta and the position gradients' runs use
// them in fp32. Head columns are zero-padded to Dk = D rounded up to 16, partial tiles to the tile
// (zero rows), so any D whose tiles fit shared memory runs.
// Block kinds and what they write (fp32 unless said):
//   forward: out (16-bit), lse, O (saved, as the fp32 path's);
//   dq:      dqf = c sum_j dS k_j (fp32 scratch: the host adds c dC2P PK before rounding once),
//            delta, dC2P (16-bit: each element one run's fp32 sum, rounded once);
//   dkv:     dkf = c sum_i dS q_i (fp32 scratch), dv (16-bit), dP2C (16-bit).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "ops/disentangled_tiles.h"

namespace ftune::disentangled {

FTUNE_HD float to_f32(bf16_t x) { return bf16_to_float(x); }
FTUNE_HD float to_f32(f16_t x) { return f16_to_float(x); }
FTUNE_HD void round_into(bf16_t* dst, float x) { *dst = float_to_bf16(x); }
FTUNE_HD void round_into(f16_t* dst, float x) { *dst = float_to_f16(x); }

// One 16-bit operand of ex.mma: element (r, c) at p[r ld + c] (row-major) or p[c ld + r].
template <class S>
struct MmaOperand {
  const S* p;
  int64_t ld;
  bool col;
  FTUNE_HD float at(int64_t r, int64_t c) const { return to_f32(col ? p[c * ld + r] : p[r * ld + c]); }
};

// The 16-bit path's shared memory: rows of 16-bit tiles are Dk + 8 (or bk + 8) elements apart,
// fp32 tiles Dk + 4 (bk + 4), every segment starting on 128 bytes (WMMA needs 32-byte-aligned
// fragments and leading dimensions of 8 16-bit / 4 fp32 elements).
FTUNE_HD int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }
FTUNE_HD int64_t seg(int64_t bytes) { return (bytes + 127) / 128 * 128; }

struct Shared16 {
  int64_t Dk, lh, lb, lf, lbf;  // padded D; 16-bit row strides (D, tile); fp32 (D, tile)
  FTUNE_HD Shared16(int64_t tile, int64_t D)
      : Dk(round16(D)), lh(round16(D) + 8), lb(tile + 8), lf(round16(D) + 4), lbf(tile + 4) {}
};

FTUNE_HD int64_t fused16_shared_bytes(FusedKind kind, int64_t tile, int64_t D) {
  const Shared16 g(tile, D);
  const int64_t h_rows = seg(tile * g.lh * 2), f_tile = seg(tile * g.lbf * 4),
                h_tile = seg(tile * g.lb * 2), f_rows = seg(tile * g.lf * 4), vec = seg(tile * 4);
  switch (kind) {
    case FusedKind::Forward: return 3 * h_rows + f_tile + h_tile + f_rows + 3 * vec;
    case FusedKind::Dq: return 4 * h_rows + 2 * f_tile + h_tile + f_rows + 4 * vec;
    case FusedKind::Dkv: return 4 * h_rows + 2 * f_tile + 2 * h_tile + 2 * f_rows + 4 * vec;
  }
  return 0;
}

// Dynamic shared memory a 16-bit block may use: 99 KiB, what sm_86 / sm_89 / sm_120 allow a block
// (sm_80 and sm_90 allow more); the kernels opt in past the default 48 KiB.
constexpr int64_t kMaxShared16Bytes = 99 * 1024;

// Tile size (queries = keys) of each block kind: the largest of 64, 32, 16 that fits; 0 when none
// does (the op then runs the fp32 kernel on staged copies).
inline int64_t fused16_tile(FusedKind kind, int64_t D) {
  for (int64_t t : {64, 32, 16})
    if (fused16_shared_bytes(kind, t, D) <= kMaxShared16Bytes) return t;
  return 0;
}

// The 16-bit call's pointers; base carries the fp32 ones the shared helpers read (c2p, p2c, lse,
// obuf, delta, Wp, rng, row0).
template <class S>
struct Fused16Ptrs {
  FusedPtrs base;
  const S *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  S* out = nullptr;
  S* dv = nullptr;
  float *dqf = nullptr, *dkf = nullptr;  // (N, C), row stride C
  S *dc2p = nullptr, *dp2c = nullptr;    // (H, B T, Wh)
  int64_t Wh = 0;                        // their row stride
};

// Rows [r0, r0 + n) of head h of a 16-bit (N, C) tensor (row stride ld) into `rows` shared rows
// of g.lh elements, zero past n rows and D columns (to Dk).
template <class Exec, class S>
FTUNE_HD void load_rows16(int t, S* dst, const Shared16& g, const S* src, int64_t ld, int64_t r0,
                          int64_t n, int64_t rows, int64_t h, int64_t D) {
  for (int64_t e = t; e < rows * g.Dk; e += Exec::kNT) {
    const int64_t r = e / g.Dk, d = e % g.Dk;
    dst[r * g.lh + d] = r < n && d < D ? src[(r0 + r) * ld + h * D + d] : S{0};
  }
}

// A run-length step of a position gradient whose row is 16-bit: as run_step, rounding each
// closed run once.
template <class S>
FTUNE_HD void run_step16(float* run_r, float* run_s, S* row, int64_t r, float g) {
  if (static_cast<float>(r) != *run_r) {
    if (*run_r >= 0.0f) round_into(row + static_cast<int64_t>(*run_r), *run_s);
    *run_r = static_cast<float>(r);
    *run_s = g;
  } else {
    *run_s += g;
  }
}

// Carves the block's shared memory in order.
struct Carve {
  char* at;
  template <class X>
  FTUNE_HD X* take(int64_t bytes) {
    X* p = reinterpret_cast<X*>(at);
    at += seg(bytes);
    return p;
  }
};

template <class Exec, class S>
FTUNE_HD void forward_block16(Exec& ex, const DisentangledArgs& a, const Fused16Ptrs<S>& t,
                              int64_t bt, int64_t tile, int64_t bh, char* smem) {
  constexpr int NT = Exec::kNT;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, C = H * D;
  const int64_t b = bh / H, h = bh % H, i0 = tile * bt, nq = min64(bt, T - i0);
  const Shared16 g(bt, D);
  Carve cv{smem};
  S* qs = cv.take<S>(bt * g.lh * 2);
  S* ks = cv.take<S>(bt * g.lh * 2);
  S* vs = cv.take<S>(bt * g.lh * 2);
  float* s = cv.take<float>(bt * g.lbf * 4);
  S* ps = cv.take<S>(bt * g.lb * 2);  // exp(s - m) x the dropout multiplier, rounded
  float* acc = cv.take<float>(bt * g.lf * 4);
  float* m = cv.take<float>(bt * 4);
  float* l = cv.take<float>(bt * 4);
  float* al = cv.take<float>(bt * 4);
  ex.phase([&](int th) {
    load_rows16<Exec>(th, qs, g, t.q, a.ldq, b * T + i0, nq, bt, h, D);
    for (int64_t e = th; e < bt * g.Dk; e += NT) acc[e / g.Dk * g.lf + e % g.Dk] = 0.0f;
    for (int64_t ii = th; ii < bt; ii += NT) m[ii] = -INFINITY, l[ii] = 0.0f;
  });
  for (int64_t j0 = 0; j0 < T; j0 += bt) {
    const int64_t nk = min64(bt, T - j0);
    ex.phase([&](int th) {
      load_rows16<Exec>(th, ks, g, t.k, a.ldk, b * T + j0, nk, bt, h, D);
      load_rows16<Exec>(th, vs, g, t.v, a.ldv, b * T + j0, nk, bt, h, D);
    });
    ex.mma(s, g.lbf, MmaOperand<S>{qs, g.lh, false}, MmaOperand<S>{ks, g.lh, true}, bt, bt, g.Dk,
           false);  // q_i . k_j
    ex.phase([&](int th) {
      for (int64_t e = th; e < nq * nk; e += NT) {
        const int64_t ii = e / nk, jj = e % nk;
        float& x = s[ii * g.lbf + jj];
        x = fused_score(a, t.base, b, h, i0 + ii, j0 + jj, x);
      }
    });
    ex.phase([&](int th) { running_max<NT>(th, nq, nk, s, g.lbf, m, al); });
    ex.phase([&](int th) {
      for (int64_t e = th; e < bt * bt; e += NT) {
        const int64_t ii = e / bt, jj = e % bt;
        float p = 0.0f, pd = 0.0f;
        if (ii < nq && jj < nk) {
          p = m[ii] == -INFINITY ? 0.0f : expf(s[ii * g.lbf + jj] - m[ii]);
          pd = p * fused_keep(a, t.base, b, h, i0 + ii, j0 + jj);
        }
        s[ii * g.lbf + jj] = p;
        round_into(ps + ii * g.lb + jj, pd);
      }
      for (int64_t e = th; e < nq * g.Dk; e += NT) acc[e / g.Dk * g.lf + e % g.Dk] *= al[e / g.Dk];
    });
    ex.mma(acc, g.lf, MmaOperand<S>{ps, g.lb, false}, MmaOperand<S>{vs, g.lh, false}, bt, g.Dk,
           bt, true);  // acc += P V
    ex.phase([&](int th) {
      for (int64_t ii = th; ii < nq; ii += NT) {
        float sum = 0.0f;
        for (int64_t jj = 0; jj < nk; ++jj) sum += s[ii * g.lbf + jj];
        l[ii] = l[ii] * al[ii] + sum;
      }
    });
  }
  ex.phase([&](int th) {
    for (int64_t e = th; e < nq * D; e += NT) {
      const int64_t ii = e / D, d = e % D, n = b * T + i0 + ii;
      const float o = acc[ii * g.lf + d] / l[ii];
      round_into(t.out + n * a.ldo + h * D + d, o);
      t.base.obuf[n * C + h * D + d] = o;
    }
    for (int64_t ii = th; ii < nq; ii += NT) t.base.lse[bh * T + i0 + ii] = m[ii] + logf(l[ii]);
  });
}

// Both backward blocks' shared memory: the tiles of q, dO, k, v (16-bit), S and dP (fp32), dS
// (and, dkv, P x mult) rounded, the accumulators (dq; dkv: dk, dv), the query rows' lse and delta
// and the position gradients' runs.
template <class S>
struct Backward16Smem {
  S *qs, *dos, *ks, *vs, *ds16, *pt16 = nullptr;
  float *s, *dp, *acc, *acc2 = nullptr, *lse, *dl, *run_r, *run_s;
  FTUNE_HD Backward16Smem(char* smem, int64_t bt, const Shared16& g, bool dkv) {
    Carve cv{smem};
    qs = cv.take<S>(bt * g.lh * 2);
    dos = cv.take<S>(bt * g.lh * 2);
    ks = cv.take<S>(bt * g.lh * 2);
    vs = cv.take<S>(bt * g.lh * 2);
    s = cv.take<float>(bt * g.lbf * 4);
    dp = cv.take<float>(bt * g.lbf * 4);
    ds16 = cv.take<S>(bt * g.lb * 2);
    if (dkv) pt16 = cv.take<S>(bt * g.lb * 2);
    acc = cv.take<float>(bt * g.lf * 4);
    if (dkv) acc2 = cv.take<float>(bt * g.lf * 4);
    lse = cv.take<float>(bt * 4);
    dl = cv.take<float>(bt * 4);
    run_r = cv.take<float>(bt * 4);
    run_s = cv.take<float>(bt * 4);
  }
};

// Both backward blocks' step over one (query tile, key tile): S = Q K^T and dP = dO V^T on tensor
// cores, then dS in fp32 (into s), dS and P x mult rounded (ds16, pt16 when there; zero outside
// the nq x nk corner).
template <class Exec, class S>
FTUNE_HD void backward_tile16(Exec& ex, const DisentangledArgs& a, const FusedPtrs& t, int64_t b,
                              int64_t h, int64_t i0, int64_t j0, int64_t nq, int64_t nk,
                              int64_t bt, const Shared16& g, const Backward16Smem<S>& m) {
  ex.mma(m.s, g.lbf, MmaOperand<S>{m.qs, g.lh, false}, MmaOperand<S>{m.ks, g.lh, true}, bt, bt,
         g.Dk, false);  // q_i . k_j
  ex.mma(m.dp, g.lbf, MmaOperand<S>{m.dos, g.lh, false}, MmaOperand<S>{m.vs, g.lh, true}, bt, bt,
         g.Dk, false);  // dO_i . v_j
  ex.phase([&](int th) {
    for (int64_t e = th; e < bt * bt; e += Exec::kNT) {
      const int64_t ii = e / bt, jj = e % bt;
      float ds = 0.0f, pd = 0.0f;
      if (ii < nq && jj < nk)
        ds = fused_score_grad(a, t, b, h, i0 + ii, j0 + jj, m.s[ii * g.lbf + jj],
                              m.dp[ii * g.lbf + jj], m.lse[ii], m.dl[ii], &pd);
      m.s[ii * g.lbf + jj] = ds;
      round_into(m.ds16 + ii * g.lb + jj, ds);
      if (m.pt16 != nullptr) round_into(m.pt16 + ii * g.lb + jj, pd);
    }
  });
}

template <class Exec, class S>
FTUNE_HD void dq_block16(Exec& ex, const DisentangledArgs& a, const Fused16Ptrs<S>& t, int64_t bt,
                         int64_t tile, int64_t bh, char* smem) {
  constexpr int NT = Exec::kNT;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, C = H * D, BT = a.B * T;
  const int64_t b = bh / H, h = bh % H, i0 = tile * bt, nq = min64(bt, T - i0);
  const Shared16 g(bt, D);
  const Backward16Smem<S> m(smem, bt, g, false);
  ex.phase([&](int th) {
    load_rows16<Exec>(th, m.qs, g, t.q, a.ldq, b * T + i0, nq, bt, h, D);
    load_rows16<Exec>(th, m.dos, g, t.dout, a.ldo, b * T + i0, nq, bt, h, D);
    for (int64_t e = th; e < bt * g.Dk; e += NT) m.acc[e / g.Dk * g.lf + e % g.Dk] = 0.0f;
  });
  ex.phase([&](int th) {
    for (int64_t ii = th; ii < nq; ii += NT) {
      const float* o = t.base.obuf + (b * T + i0 + ii) * C + h * D;
      float x = 0.0f;
      for (int64_t d = 0; d < D; ++d) x += to_f32(m.dos[ii * g.lh + d]) * o[d];
      m.dl[ii] = x;
      m.lse[ii] = t.base.lse[bh * T + i0 + ii];
      m.run_r[ii] = -1.0f;
      m.run_s[ii] = 0.0f;
    }
  });
  for (int64_t j0 = 0; j0 < T; j0 += bt) {
    const int64_t nk = min64(bt, T - j0);
    ex.phase([&](int th) {
      load_rows16<Exec>(th, m.ks, g, t.k, a.ldk, b * T + j0, nk, bt, h, D);
      load_rows16<Exec>(th, m.vs, g, t.v, a.ldv, b * T + j0, nk, bt, h, D);
    });
    backward_tile16(ex, a, t.base, b, h, i0, j0, nq, nk, bt, g, m);
    ex.mma(m.acc, g.lf, MmaOperand<S>{m.ds16, g.lb, false}, MmaOperand<S>{m.ks, g.lh, false}, bt,
           g.Dk, bt, true);  // acc += dS K
    ex.phase([&](int th) {
      if (!a.spec.c2p) return;
      for (int64_t ii = th; ii < nq; ii += NT) {
        S* row = t.dc2p + (h * BT + b * T + i0 + ii) * t.Wh;
        for (int64_t jj = 0; jj < nk; ++jj)
          run_step16(m.run_r + ii, m.run_s + ii, row, a.rel(i0 + ii, j0 + jj) - a.rlo,
                     m.s[ii * g.lbf + jj]);
      }
    });
  }
  ex.phase([&](int th) {
    for (int64_t e = th; e < nq * D; e += NT) {
      const int64_t ii = e / D, d = e % D;
      t.dqf[(b * T + i0 + ii) * C + h * D + d] = a.scale * m.acc[ii * g.lf + d];
    }
    for (int64_t ii = th; ii < nq; ii += NT) {
      t.base.delta[bh * T + i0 + ii] = m.dl[ii];
      if (a.spec.c2p && m.run_r[ii] >= 0.0f)
        round_into(t.dc2p + (h * BT + b * T + i0 + ii) * t.Wh + static_cast<int64_t>(m.run_r[ii]),
                   m.run_s[ii]);
    }
  });
}

template <class Exec, class S>
FTUNE_HD void dkv_block16(Exec& ex, const DisentangledArgs& a, const Fused16Ptrs<S>& t,
                          int64_t bt, int64_t tile, int64_t bh, char* smem) {
  constexpr int NT = Exec::kNT;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, C = H * D, BT = a.B * T;
  const int64_t b = bh / H, h = bh % H, j0 = tile * bt, nk = min64(bt, T - j0);
  const Shared16 g(bt, D);
  const Backward16Smem<S> m(smem, bt, g, true);
  float* dka = m.acc;
  float* dva = m.acc2;
  ex.phase([&](int th) {
    load_rows16<Exec>(th, m.ks, g, t.k, a.ldk, b * T + j0, nk, bt, h, D);
    load_rows16<Exec>(th, m.vs, g, t.v, a.ldv, b * T + j0, nk, bt, h, D);
    for (int64_t e = th; e < bt * g.Dk; e += NT)
      dka[e / g.Dk * g.lf + e % g.Dk] = 0.0f, dva[e / g.Dk * g.lf + e % g.Dk] = 0.0f;
    for (int64_t jj = th; jj < bt; jj += NT) m.run_r[jj] = -1.0f, m.run_s[jj] = 0.0f;
  });
  for (int64_t i0 = 0; i0 < T; i0 += bt) {
    const int64_t nq = min64(bt, T - i0);
    ex.phase([&](int th) {
      load_rows16<Exec>(th, m.qs, g, t.q, a.ldq, b * T + i0, nq, bt, h, D);
      load_rows16<Exec>(th, m.dos, g, t.dout, a.ldo, b * T + i0, nq, bt, h, D);
      for (int64_t ii = th; ii < nq; ii += NT)
        m.lse[ii] = t.base.lse[bh * T + i0 + ii], m.dl[ii] = t.base.delta[bh * T + i0 + ii];
    });
    backward_tile16(ex, a, t.base, b, h, i0, j0, nq, nk, bt, g, m);
    // Rows: keys; the sums run over queries (the tiles read transposed).
    ex.mma(dva, g.lf, MmaOperand<S>{m.pt16, g.lb, true}, MmaOperand<S>{m.dos, g.lh, false}, bt,
           g.Dk, bt, true);  // dv += (P mult)^T dO
    ex.mma(dka, g.lf, MmaOperand<S>{m.ds16, g.lb, true}, MmaOperand<S>{m.qs, g.lh, false}, bt,
           g.Dk, bt, true);  // dk += dS^T Q
    ex.phase([&](int th) {
      if (!a.spec.p2c) return;
      for (int64_t jj = th; jj < nk; jj += NT) {
        S* row = t.dp2c + (h * BT + b * T + j0 + jj) * t.Wh;
        for (int64_t ii = 0; ii < nq; ++ii)
          run_step16(m.run_r + jj, m.run_s + jj, row, a.rel(i0 + ii, j0 + jj) - a.rlo,
                     m.s[ii * g.lbf + jj]);
      }
    });
  }
  ex.phase([&](int th) {
    for (int64_t e = th; e < nk * D; e += NT) {
      const int64_t jj = e / D, d = e % D, n = b * T + j0 + jj;
      t.dkf[n * C + h * D + d] = a.scale * dka[jj * g.lf + d];
      round_into(t.dv + n * a.lddv + h * D + d, dva[jj * g.lf + d]);
    }
    for (int64_t jj = th; jj < nk; jj += NT)
      if (a.spec.p2c && m.run_r[jj] >= 0.0f)
        round_into(t.dp2c + (h * BT + b * T + j0 + jj) * t.Wh + static_cast<int64_t>(m.run_r[jj]),
                   m.run_s[jj]);
  });
}

}  // namespace ftune::disentangled
