// The fused disentangled-attention kernel's per-block arithmetic (ops/disentangled_attention.h),
// written once for the GPU and for a host emulation of it: each block body below is a sequence of
// phases, every phase a function of the thread index t of NT threads that strides over its work,
// and the caller's Exec runs a phase (on CUDA: thread threadIdx.x, then __syncthreads(); on the
// host: threads 0 .. NT - 1 one after another). Shared memory is the caller's `sm`. Each sum runs
// in one thread in index order, so the emulation gives the kernel's arithmetic in the kernel's
// order, and the same inputs give the same bits on every run (no atomics anywhere).
//
// For one (sequence b, head h), with c the scale, W = rhi - rlo relative indices in reach and
// r'(i, j) = r(i, j) - rlo, and the products precomputed by GEMMs (per head, in the workspace):
//   C2P[i, r'] = c q_i . pk_{rlo + r'},   P2C[j, r'] = c k_j . pq_{rlo + r'}   ((H, B T, Wp) each)
//   s'_ij = 0 for a padding query i (HF's uniform row), -inf for a padding key, else
//           c q_i . k_j + C2P[i, r'(i, j)] + P2C[j, r'(i, j)]
// forward block (query tile of bq rows; key tiles of bk in order): online softmax (m, l) per row
//   (a row's maximum and sum serial in one thread, the exponentials and products spread over all),
//   acc = acc alpha + sum_j exp(s' - m) mult_ij v_j; out = acc / l; saved: lse = m + log l and O
// dq block (query tile; key tiles in order): P = exp(s' - lse); dP = mult (dO . v);
//   delta_i = dO_i . O_i;  dS = P (dP - delta) (0 for a padding query);  dq = c sum_j dS k_j;
//   dC2P[i, r'] = sum of dS_ij over the run of keys j sharing r'(i, j) (r' is monotone in j, so
//   each run is contiguous: one store per (i, r'), in order)
// dkv block (key tile; query tiles in order): dv = sum_i P mult dO_i;  dk = c sum_i dS q_i;
//   dP2C[j, r'] = sum of dS_ij over the run of queries i sharing r'(i, j)
// The host then adds c dC2P PK to dq and c dP2C PQ to dk and forms dPK = c dC2P^T Q,
// dPQ = c dP2C^T K (GEMMs per head, fixed order). Nothing (B, H, T, T) is ever stored.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/philox.h"
#include "ops/disentangled_attention.h"

// Unrolls the register tile's short loops on the device (their arrays then stay in registers).
#if defined(__CUDA_ARCH__)
#define FTUNE_UNROLL _Pragma("unroll")
#else
#define FTUNE_UNROLL
#endif

namespace ftune::disentangled {

constexpr int kThreads = 128;
// Shared memory per block: the default 48 KiB less room for the compiler's own.
constexpr int64_t kMaxSharedFloats = 47 * 1024 / 4;

// Where the fused path keeps things, in floats. Workspace (after the relative-index table):
// C2P and P2C (H, B T, Wp) for the terms that are on, then, backward, dC2P and dP2C (same shapes)
// and delta (B H T). Saved: lse (B H T), then O in fp32 (B T, C).
struct FusedLayout {
  int64_t W = 0, Wp = 0;       // relative indices in reach; the products' row stride
  int64_t c2p = 0, p2c = 0, dc2p = 0, dp2c = 0, delta = 0, workspace = 0;
  int64_t lse = 0, obuf = 0, saved = 0;
};

inline FusedLayout fused_layout(const DisentangledSpec& s, int64_t B, int64_t T, int64_t rlo,
                                int64_t rhi, bool backward) {
  FusedLayout L;
  L.W = rhi - rlo;
  L.Wp = (L.W + 3) / 4 * 4;
  const int64_t prod = s.heads * B * T * L.Wp, rows = B * s.heads * T;
  int64_t at = 0;
  L.c2p = at, at += s.c2p ? prod : 0;
  L.p2c = at, at += s.p2c ? prod : 0;
  L.dc2p = at, at += backward && s.c2p ? prod : 0;
  L.dp2c = at, at += backward && s.p2c ? prod : 0;
  L.delta = at, at += backward ? rows : 0;
  L.workspace = at;
  L.lse = 0;
  L.obuf = rows;
  L.saved = rows + B * T * s.heads * s.head_dim;
  return L;
}

// Tile sizes (bq = bk) of each block kind: the largest of 32, 16, 8, 4 whose shared memory fits.
enum class FusedKind { Forward, Dq, Dkv };
// Rows of q, k, v and dO in shared memory are D + 1 floats apart, so the threads of a warp that
// read element d of different rows hit different banks. The products over a tile run in 2 x 4
// register tiles (Tile24), each sum in index order.
FTUNE_HD int64_t fused_shared_floats(FusedKind kind, int64_t bq, int64_t bk, int64_t D) {
  const int64_t ls = bk + 1, Dp = D + 1;
  switch (kind) {
    case FusedKind::Forward: return bq * Dp + bq * D + 2 * bk * Dp + 2 * bq * ls + 3 * bq;
    case FusedKind::Dq: return 2 * bq * Dp + bq * D + 2 * bk * Dp + bq * ls + 4 * bq;
    case FusedKind::Dkv:
      return 2 * bk * Dp + 2 * bk * D + 2 * bq * Dp + 2 * bq * ls + 2 * bq + 2 * bk;
  }
  return 0;
}
inline int64_t fused_tile(FusedKind kind, int64_t D) {
  for (int64_t t : {32, 16, 8, 4})
    if (fused_shared_floats(kind, t, t, D) <= kMaxSharedFloats) return t;
  return 0;  // the caller refuses the head size
}

// The call's pointers (device pointers on CUDA, host ones in the emulation).
struct FusedPtrs {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  const float *c2p = nullptr, *p2c = nullptr;  // the precomputed products (see FusedLayout)
  float *out = nullptr, *lse = nullptr, *obuf = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dc2p = nullptr, *dp2c = nullptr;
  float* delta = nullptr;
  int64_t Wp = 0;
  RngKey rng;        // resolved (resolve_micro)
  uint64_t row0 = 0;
};

// s'_ij (see the top) from dot = q_i . k_j.
FTUNE_HD float fused_score(const DisentangledArgs& a, const FusedPtrs& t, int64_t b, int64_t h,
                           int64_t i, int64_t j, float dot) {
  if (!a.real(b, i)) return 0.0f;
  if (!a.real(b, j)) return -INFINITY;
  const int64_t BT = a.B * a.T, r = a.rel(i, j) - a.rlo;
  float x = dot * a.scale;
  if (a.spec.c2p) x += t.c2p[(h * BT + b * a.T + i) * t.Wp + r];
  if (a.spec.p2c) x += t.p2c[(h * BT + b * a.T + j) * t.Wp + r];
  return x;
}

FTUNE_HD float fused_keep(const DisentangledArgs& a, const FusedPtrs& t, int64_t b, int64_t h,
                          int64_t i, int64_t j) {
  if (a.dropout_p <= 0.0f) return 1.0f;
  return philox_uniform_at(t.rng, a.stream_row(t.row0, b, h, i) + static_cast<uint64_t>(j)) >=
                 a.dropout_p
             ? 1.0f / (1.0f - a.dropout_p)
             : 0.0f;
}

// Backward: dS_ij (0 for a padding query) from P_ij = exp(s'_ij - lse_i) and dP_ij = mult_ij
// dov (qk = q_i . k_j, dov = dO_i . v_j); *pd receives P_ij mult_ij.
FTUNE_HD float fused_score_grad(const DisentangledArgs& a, const FusedPtrs& t, int64_t b,
                                int64_t h, int64_t i, int64_t j, float qk, float dov, float lse,
                                float delta, float* pd) {
  const float sc = fused_score(a, t, b, h, i, j, qk);
  const float p = sc == -INFINITY ? 0.0f : expf(sc - lse);
  const float keep = fused_keep(a, t, b, h, i, j);
  *pd = p * keep;
  return a.real(b, i) ? p * (dov * keep - delta) : 0.0f;
}

// A 2 x 4 register tile of a small product in shared memory: v[x][y] = sum over k < K, in order,
// of A(r_x, k) B(k, c_y), A(r, k) = A[r ar + k ak], B(k, c) = B[k bk + c bc], for rows
// r_x = mr + x hr and columns c_y = mc + y hc of an (nr, nc) output; ok() says which exist (the
// others are computed on row or column 0 and dropped). Six shared loads per eight
// multiply-adds instead of sixteen.
struct Tile24 {
  int64_t r[2], c[4], nr, nc;
  float v[2][4];
  FTUNE_HD bool ok(int x, int y) const { return r[x] < nr && c[y] < nc; }
  FTUNE_HD void product(const float* A, int64_t ar, int64_t ak, const float* B, int64_t bk,
                        int64_t bc, int64_t K) {
    const int64_t a0 = (r[0] < nr ? r[0] : 0) * ar, a1 = (r[1] < nr ? r[1] : 0) * ar;
    int64_t cb[4];
    FTUNE_UNROLL
    for (int y = 0; y < 4; ++y) cb[y] = (c[y] < nc ? c[y] : 0) * bc;
    float acc[2][4] = {};
    for (int64_t k = 0; k < K; ++k) {
      const float x0 = A[a0 + k * ak], x1 = A[a1 + k * ak];
      FTUNE_UNROLL
      for (int y = 0; y < 4; ++y) {
        const float by = B[k * bk + cb[y]];
        acc[0][y] += x0 * by;
        acc[1][y] += x1 * by;
      }
    }
    FTUNE_UNROLL
    for (int y = 0; y < 4; ++y) v[0][y] = acc[0][y], v[1][y] = acc[1][y];
  }
};

// Thread t's tiles of an (nr, nc) output, f(tile) for each.
template <class F>
FTUNE_HD void for_tiles(int t, int NT, int64_t nr, int64_t nc, F&& f) {
  const int64_t hr = (nr + 1) / 2, hc = (nc + 3) / 4;
  for (int64_t m = t; m < hr * hc; m += NT) {
    Tile24 o;
    o.nr = nr, o.nc = nc;
    FTUNE_UNROLL
    for (int x = 0; x < 2; ++x) o.r[x] = m / hc + x * hr;
    FTUNE_UNROLL
    for (int y = 0; y < 4; ++y) o.c[y] = m % hc + y * hc;
    f(o);
  }
}

FTUNE_HD int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

// Rows [r0, r0 + n) of head h of a (N, C) tensor with row stride ld into shared rows D + 1 apart.
template <class Exec>
FTUNE_HD void load_rows(int t, float* dst, const float* src, int64_t ld, int64_t r0, int64_t n,
                        int64_t h, int64_t D) {
  for (int64_t e = t; e < n * D; e += Exec::kNT)
    dst[e / D * (D + 1) + e % D] = src[(r0 + e / D) * ld + h * D + e % D];
}

// One run-length step of a position term's gradient: dS value g at relative index r extends the
// current run (run_r, run_s) or closes it into row[run_r] and starts a new one.
FTUNE_HD void run_step(float* run_r, float* run_s, float* row, int64_t r, float g) {
  if (static_cast<float>(r) != *run_r) {
    if (*run_r >= 0.0f) row[static_cast<int64_t>(*run_r)] = *run_s;
    *run_r = static_cast<float>(r);
    *run_s = g;
  } else {
    *run_s += g;
  }
}

// The online softmax's step for one key tile: each row's running maximum m over its nk new scores
// (row stride ls) and al = exp(m_old - m_new), the factor that rescales what came before.
template <int NT>
FTUNE_HD void running_max(int th, int64_t nq, int64_t nk, const float* s, int64_t ls, float* m,
                          float* al) {
  for (int64_t ii = th; ii < nq; ii += NT) {
    const float* row = s + ii * ls;
    float mx = m[ii];
    for (int64_t jj = 0; jj < nk; ++jj) mx = fmaxf(mx, row[jj]);
    al[ii] = mx == -INFINITY ? 1.0f : expf(m[ii] - mx);
    m[ii] = mx;
  }
}

// Forward block: query tile `tile` (rows tile bq ..) of sequence b = bh / H, head h = bh % H.
template <class Exec>
FTUNE_HD void forward_block(Exec& ex, const DisentangledArgs& a, const FusedPtrs& t, int64_t bq,
                            int64_t bk, int64_t tile, int64_t bh, float* sm) {
  constexpr int NT = Exec::kNT;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, C = H * D, ls = bk + 1;
  const int64_t b = bh / H, h = bh % H, i0 = tile * bq, nq = min64(bq, T - i0), Dp = D + 1;
  float* qs = sm;
  float* acc = qs + bq * Dp;
  float* ks = acc + bq * D;
  float* vs = ks + bk * Dp;
  float* s = vs + bk * Dp;
  float* sd = s + bq * ls;  // exp(s - m) x the dropout multiplier
  float* m = sd + bq * ls;
  float* l = m + bq;
  float* al = l + bq;
  ex.phase([&](int th) {
    load_rows<Exec>(th, qs, t.q, a.ldq, b * T + i0, nq, h, D);
    for (int64_t e = th; e < nq * D; e += NT) acc[e] = 0.0f;
    for (int64_t ii = th; ii < nq; ii += NT) m[ii] = -INFINITY, l[ii] = 0.0f;
  });
  for (int64_t j0 = 0; j0 < T; j0 += bk) {
    const int64_t nk = min64(bk, T - j0);
    ex.phase([&](int th) {
      load_rows<Exec>(th, ks, t.k, a.ldk, b * T + j0, nk, h, D);
      load_rows<Exec>(th, vs, t.v, a.ldv, b * T + j0, nk, h, D);
    });
    ex.phase([&](int th) {
      for_tiles(th, NT, nq, nk, [&](Tile24& o) {
        o.product(qs, Dp, 1, ks, 1, Dp, D);
        FTUNE_UNROLL
        for (int x = 0; x < 2; ++x)
          FTUNE_UNROLL
          for (int y = 0; y < 4; ++y)
            if (o.ok(x, y))
              s[o.r[x] * ls + o.c[y]] =
                  fused_score(a, t, b, h, i0 + o.r[x], j0 + o.c[y], o.v[x][y]);
      });
    });
    ex.phase([&](int th) { running_max<NT>(th, nq, nk, s, ls, m, al); });
    ex.phase([&](int th) {
      for (int64_t e = th; e < nq * nk; e += NT) {
        const int64_t ii = e / nk, jj = e % nk;
        const float p = m[ii] == -INFINITY ? 0.0f : expf(s[ii * ls + jj] - m[ii]);
        s[ii * ls + jj] = p;
        sd[ii * ls + jj] = p * fused_keep(a, t, b, h, i0 + ii, j0 + jj);
      }
    });
    ex.phase([&](int th) {
      for_tiles(th, NT, nq, D, [&](Tile24& o) {
        o.product(sd, ls, 1, vs, Dp, 1, nk);
        FTUNE_UNROLL
        for (int x = 0; x < 2; ++x)
          FTUNE_UNROLL
          for (int y = 0; y < 4; ++y)
            if (o.ok(x, y)) {
              float& e = acc[o.r[x] * D + o.c[y]];
              e = e * al[o.r[x]] + o.v[x][y];
            }
      });
      for (int64_t ii = th; ii < nq; ii += NT) {
        float sum = 0.0f;
        for (int64_t jj = 0; jj < nk; ++jj) sum += s[ii * ls + jj];
        l[ii] = l[ii] * al[ii] + sum;
      }
    });
  }
  ex.phase([&](int th) {
    for (int64_t e = th; e < nq * D; e += NT) {
      const int64_t ii = e / D, d = e % D, n = b * T + i0 + ii;
      const float o = acc[e] / l[ii];
      t.out[n * a.ldo + h * D + d] = o;
      t.obuf[n * C + h * D + d] = o;
    }
    for (int64_t ii = th; ii < nq; ii += NT) t.lse[bh * T + i0 + ii] = m[ii] + logf(l[ii]);
  });
}

// dq block: query tile `tile` of (b, h) = bh; writes dq (c sum_j dS k_j, before the c2p GEMM),
// the runs of dC2P and delta.
template <class Exec>
FTUNE_HD void dq_block(Exec& ex, const DisentangledArgs& a, const FusedPtrs& t, int64_t bq,
                       int64_t bk, int64_t tile, int64_t bh, float* sm) {
  constexpr int NT = Exec::kNT;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, C = H * D, ls = bk + 1;
  const int64_t b = bh / H, h = bh % H, i0 = tile * bq, nq = min64(bq, T - i0), Dp = D + 1;
  const int64_t BT = a.B * T;
  float* qs = sm;
  float* dos = qs + bq * Dp;
  float* acc = dos + bq * Dp;
  float* ks = acc + bq * D;
  float* vs = ks + bk * Dp;
  float* ds = vs + bk * Dp;
  float* lse = ds + bq * ls;
  float* dl = lse + bq;
  float* run_r = dl + bq;
  float* run_s = run_r + bq;
  ex.phase([&](int th) {
    load_rows<Exec>(th, qs, t.q, a.ldq, b * T + i0, nq, h, D);
    load_rows<Exec>(th, dos, t.dout, a.ldo, b * T + i0, nq, h, D);
    for (int64_t e = th; e < nq * D; e += NT) acc[e] = 0.0f;
  });
  ex.phase([&](int th) {
    for (int64_t ii = th; ii < nq; ii += NT) {
      const float* o = t.obuf + (b * T + i0 + ii) * C + h * D;
      float x = 0.0f;
      for (int64_t d = 0; d < D; ++d) x += dos[ii * Dp + d] * o[d];
      dl[ii] = x;
      lse[ii] = t.lse[bh * T + i0 + ii];
      run_r[ii] = -1.0f;
      run_s[ii] = 0.0f;
    }
  });
  for (int64_t j0 = 0; j0 < T; j0 += bk) {
    const int64_t nk = min64(bk, T - j0);
    ex.phase([&](int th) {
      load_rows<Exec>(th, ks, t.k, a.ldk, b * T + j0, nk, h, D);
      load_rows<Exec>(th, vs, t.v, a.ldv, b * T + j0, nk, h, D);
    });
    ex.phase([&](int th) {
      for_tiles(th, NT, nq, nk, [&](Tile24& o) {
        Tile24 g = o;
        o.product(qs, Dp, 1, ks, 1, Dp, D);
        g.product(dos, Dp, 1, vs, 1, Dp, D);
        float pd;
        FTUNE_UNROLL
        for (int x = 0; x < 2; ++x)
          FTUNE_UNROLL
          for (int y = 0; y < 4; ++y)
            if (o.ok(x, y))
              ds[o.r[x] * ls + o.c[y]] =
                  fused_score_grad(a, t, b, h, i0 + o.r[x], j0 + o.c[y], o.v[x][y], g.v[x][y],
                                   lse[o.r[x]], dl[o.r[x]], &pd);
      });
    });
    ex.phase([&](int th) {
      for_tiles(th, NT, nq, D, [&](Tile24& o) {
        o.product(ds, ls, 1, ks, Dp, 1, nk);
        FTUNE_UNROLL
        for (int x = 0; x < 2; ++x)
          FTUNE_UNROLL
          for (int y = 0; y < 4; ++y)
            if (o.ok(x, y)) acc[o.r[x] * D + o.c[y]] += o.v[x][y];
      });
      if (!a.spec.c2p) return;
      for (int64_t ii = th; ii < nq; ii += NT) {
        float* row = t.dc2p + (h * BT + b * T + i0 + ii) * t.Wp;
        for (int64_t jj = 0; jj < nk; ++jj)
          run_step(run_r + ii, run_s + ii, row, a.rel(i0 + ii, j0 + jj) - a.rlo, ds[ii * ls + jj]);
      }
    });
  }
  ex.phase([&](int th) {
    for (int64_t e = th; e < nq * D; e += NT) {
      const int64_t ii = e / D, d = e % D;
      t.dq[(b * T + i0 + ii) * a.lddq + h * D + d] = a.scale * acc[e];
    }
    for (int64_t ii = th; ii < nq; ii += NT) {
      t.delta[bh * T + i0 + ii] = dl[ii];
      if (a.spec.c2p && run_r[ii] >= 0.0f)
        t.dc2p[(h * BT + b * T + i0 + ii) * t.Wp + static_cast<int64_t>(run_r[ii])] = run_s[ii];
    }
  });
}

// dkv block: key tile `tile` of (b, h) = bh; writes dk (c sum_i dS q_i, before the p2c GEMM), dv
// and the runs of dP2C. Reads delta from the dq blocks.
template <class Exec>
FTUNE_HD void dkv_block(Exec& ex, const DisentangledArgs& a, const FusedPtrs& t, int64_t bq,
                        int64_t bk, int64_t tile, int64_t bh, float* sm) {
  constexpr int NT = Exec::kNT;
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, ls = bk + 1;
  const int64_t b = bh / H, h = bh % H, j0 = tile * bk, nk = min64(bk, T - j0), Dp = D + 1;
  const int64_t BT = a.B * T;
  float* ks = sm;
  float* vs = ks + bk * Dp;
  float* dka = vs + bk * Dp;
  float* dva = dka + bk * D;
  float* qs = dva + bk * D;
  float* dos = qs + bq * Dp;
  float* pt = dos + bq * Dp;
  float* ds = pt + bq * ls;
  float* lse = ds + bq * ls;
  float* dl = lse + bq;
  float* run_r = dl + bq;
  float* run_s = run_r + bk;
  ex.phase([&](int th) {
    load_rows<Exec>(th, ks, t.k, a.ldk, b * T + j0, nk, h, D);
    load_rows<Exec>(th, vs, t.v, a.ldv, b * T + j0, nk, h, D);
    for (int64_t e = th; e < nk * D; e += NT) dka[e] = 0.0f, dva[e] = 0.0f;
    for (int64_t jj = th; jj < nk; jj += NT) run_r[jj] = -1.0f, run_s[jj] = 0.0f;
  });
  for (int64_t i0 = 0; i0 < T; i0 += bq) {
    const int64_t nq = min64(bq, T - i0);
    ex.phase([&](int th) {
      load_rows<Exec>(th, qs, t.q, a.ldq, b * T + i0, nq, h, D);
      load_rows<Exec>(th, dos, t.dout, a.ldo, b * T + i0, nq, h, D);
      for (int64_t ii = th; ii < nq; ii += NT)
        lse[ii] = t.lse[bh * T + i0 + ii], dl[ii] = t.delta[bh * T + i0 + ii];
    });
    ex.phase([&](int th) {
      for_tiles(th, NT, nq, nk, [&](Tile24& o) {
        Tile24 g = o;
        o.product(qs, Dp, 1, ks, 1, Dp, D);
        g.product(dos, Dp, 1, vs, 1, Dp, D);
        FTUNE_UNROLL
        for (int x = 0; x < 2; ++x)
          FTUNE_UNROLL
          for (int y = 0; y < 4; ++y)
            if (o.ok(x, y)) {
              const int64_t e = o.r[x] * ls + o.c[y];
              ds[e] = fused_score_grad(a, t, b, h, i0 + o.r[x], j0 + o.c[y], o.v[x][y],
                                       g.v[x][y], lse[o.r[x]], dl[o.r[x]], &pt[e]);
            }
      });
    });
    ex.phase([&](int th) {
      for_tiles(th, NT, nk, D, [&](Tile24& o) {  // rows: keys; the sums run over queries
        Tile24 g = o;
        o.product(pt, 1, ls, dos, Dp, 1, nq);
        g.product(ds, 1, ls, qs, Dp, 1, nq);
        FTUNE_UNROLL
        for (int x = 0; x < 2; ++x)
          FTUNE_UNROLL
          for (int y = 0; y < 4; ++y)
            if (o.ok(x, y)) {
              dva[o.r[x] * D + o.c[y]] += o.v[x][y];
              dka[o.r[x] * D + o.c[y]] += g.v[x][y];
            }
      });
      if (!a.spec.p2c) return;
      for (int64_t jj = th; jj < nk; jj += NT) {
        float* row = t.dp2c + (h * BT + b * T + j0 + jj) * t.Wp;
        for (int64_t ii = 0; ii < nq; ++ii)
          run_step(run_r + jj, run_s + jj, row, a.rel(i0 + ii, j0 + jj) - a.rlo, ds[ii * ls + jj]);
      }
    });
  }
  ex.phase([&](int th) {
    for (int64_t e = th; e < nk * D; e += NT) {
      const int64_t jj = e / D, d = e % D, n = b * T + j0 + jj;
      t.dk[n * a.lddk + h * D + d] = a.scale * dka[e];
      t.dv[n * a.lddv + h * D + d] = dva[e];
    }
    for (int64_t jj = th; jj < nk; jj += NT)
      if (a.spec.p2c && run_r[jj] >= 0.0f)
        t.dp2c[(h * BT + b * T + j0 + jj) * t.Wp + static_cast<int64_t>(run_r[jj])] = run_s[jj];
  });
}

}  // namespace ftune::disentangled
