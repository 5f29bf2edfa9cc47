// Attention on the CPU (the contract of ops/attention.h). Work is split over (sequence, head)
// units across the compute threads; each unit's matrix products are single-threaded OpenBLAS GEMMs
// reading Q, K, V and writing dQ, dK, dV in place through row strides (no gathering), so the inner
// work runs at BLAS speed. For one sequence of len tokens, query head h and its kv head g:
//   forward:  S = scale Q_h K_g^T (-> softcap) -> P (masked softmax, in the saved probs);
//             P' = dropout(P);  O_h = P' V_g
//   backward: dP' = dO_h V_g^T;  dV_g += P'^T dO_h;  dS = P (dP - rowsum(P dP)), dP = dP' * mask;
//             with softcap dS *= 1 - tanh^2(S / softcap) (S recomputed);
//             dQ_h = scale dS K_g;  dK_g += scale dS^T Q_h
// The backward pass walks (sequence, kv head) units and the query heads of a group in order, so
// dK and dV of grouped-query attention sum without races or atomics.
// Keys past the last real key of a sequence are padding with probability 0 (unless some query
// sees no key at all and attends uniformly), so the GEMMs stop there: right-padded batches cost
// what their real lengths cost. Causal and windowed calls walk the queries in blocks of
// kQueryBlock rows, and each block's GEMMs cover only the band of keys its rows can see (a causal
// sequence costs about half the products, a window of W keys about len x W instead of len^2);
// bidirectional calls without a window are one block over every key, as before (same bits).
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/fast_math.h"
#include "ops/primitives_cpu.h"

namespace ftune::cpu {
namespace {

// One sequence of the call, as the loops below see it.
struct Seq {
  int64_t start = 0, len = 0;
  const int32_t* mask = nullptr;  // (len) key mask, or null
  int64_t keys = 0;  // columns [0, keys) hold every nonzero probability of the sequence
  bool dense = true;  // no padding key in [0, keys): softmax_row's straight loops apply
};

// Walks the query rows of a sequence in order and says whether row i sees any key: its range
// [lo, hi) (both non-decreasing in i) holds a real key when the last real key before hi is >= lo.
struct VisibleScan {
  const int32_t* mask;
  int64_t scanned = 0, last_real = -1;
  bool sees_a_key(int64_t lo, int64_t hi) {
    for (; scanned < hi; ++scanned)
      if (mask == nullptr || mask[scanned] != 0) last_real = scanned;
    return hi > lo && last_real >= lo;
  }
};

Seq sequence(const AttentionArgs& a, int64_t b) {
  Seq s;
  s.start = a.start(b);
  s.len = a.length(b);
  s.mask = a.key_mask ? a.key_mask + s.start : nullptr;
  // Keys from the last real one on are padding; a query that sees no key attends to all len.
  int64_t L = s.len;
  if (s.mask)
    while (L > 0 && s.mask[L - 1] == 0) --L;
  s.keys = L;
  VisibleScan scan{s.mask};
  for (int64_t i = 0; i < s.len && s.keys < s.len; ++i) {
    int64_t lo, hi;
    a.key_range(i, s.len, &lo, &hi);
    if (!scan.sees_a_key(lo, std::min(hi, L))) s.keys = s.len;
  }
  if (s.mask)
    for (int64_t j = 0; j < s.keys && s.dense; ++j) s.dense = s.mask[j] != 0;
  return s;
}

// Queries per block of a causal or windowed call.
constexpr int64_t kQueryBlock = 64;

// Whether the call's visibility is a band narrower than the whole sequence.
bool banded(const AttentionArgs& a) {
  return a.spec.causal || a.spec.window.left >= 0 || a.spec.window.right >= 0;
}

// Keys [c0, c1) that hold every nonzero probability of query rows [i0, i1): the union of the
// rows' ranges clipped to s.keys, or all of [0, s.keys) when a row sees no key and attends
// uniformly (or the call is not banded). `ahead` walks the rows in order, as softmax_row's scan.
// A single block of a whole sequence always gets [0, s.keys) (row 0 sees key 0 onwards, the last
// row every key up to the end).
struct Band {
  int64_t c0 = 0, c1 = 0;
  int64_t width() const { return c1 - c0; }
};
Band key_band(const AttentionArgs& a, const Seq& s, int64_t i0, int64_t i1, VisibleScan& ahead) {
  if (!banded(a)) return {0, s.keys};
  Band band{s.keys, 0};
  for (int64_t i = i0; i < i1; ++i) {
    int64_t lo, hi;
    a.key_range(i, s.len, &lo, &hi);
    hi = std::min(hi, s.keys);
    if (!ahead.sees_a_key(lo, hi)) return {0, s.keys};
    band.c0 = std::min(band.c0, lo);
    band.c1 = std::max(band.c1, hi);
  }
  return band;
}

// The softmax's inner loops over 16 lanes, every element on the vector path: GCC left the max
// reduction scalar (a loop-carried vmaxss) and ran the remainder of each row (up to 15 of its
// 20-250 keys) through scalar fast_exp, which bounded the softmax.
constexpr int kLanes = 16;

// The largest of x[0, n), n > 0.
float max_of(const float* x, int64_t n) {
  float lane[kLanes];
  for (int k = 0; k < kLanes; ++k) lane[k] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] = lane[k] > x[j + k] ? lane[k] : x[j + k];
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) mx = mx > x[j] ? mx : x[j];
  for (int k = 0; k < kLanes; ++k) mx = mx > lane[k] ? mx : lane[k];
  return mx;
}

// x[j] = exp(x[j] - mx) for j in [0, n); returns their sum. The last partial block goes through a
// copy padded with -inf (exp: 0).
float exp_shifted_sum(float* x, int64_t n, float mx) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      const float e = fast_exp(x[j + k] - mx);
      x[j + k] = e;
      lane[k] += e;
    }
  }
  if (j < n) {
    float t[kLanes];
    for (int k = 0; k < kLanes; ++k)
      t[k] = j + k < n ? x[j + k] : -std::numeric_limits<float>::infinity();
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      t[k] = fast_exp(t[k] - mx);
      lane[k] += t[k];
    }
    for (int64_t k = 0; j + k < n; ++k) x[j + k] = t[k];
  }
  float sum = 0.0f;
  for (int k = 0; k < kLanes; ++k) sum += lane[k];
  return sum;
}

// Row i of P (T floats) from its scores in row[0, keys): the masked softmax over the keys query i
// sees, or 1 / len over the whole sequence when it sees none; 0 in [keys, T).
void softmax_row(const AttentionArgs& a, const Seq& s, int64_t i, VisibleScan& scan, float* row) {
  int64_t lo, hi;
  a.key_range(i, s.len, &lo, &hi);
  hi = std::min(hi, s.keys);
  const float cap = a.spec.softcap;
  if (cap > 0.0f)
    for (int64_t j = lo; j < hi; ++j) row[j] = cap * std::tanh(row[j] / cap);
  const bool sees = scan.sees_a_key(lo, hi);
  if (sees && s.dense) {
    // Every key of [lo, hi) visible: straight loops the compiler vectorises (SIMD max and sum).
    const float mx = max_of(row + lo, hi - lo);
    const float sum = exp_shifted_sum(row + lo, hi - lo, mx);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = lo; j < hi; ++j) row[j] *= inv;
    for (int64_t j = 0; j < lo; ++j) row[j] = 0.0f;
    for (int64_t j = hi; j < s.keys; ++j) row[j] = 0.0f;
  } else if (sees) {
    auto visible = [&](int64_t j) { return j >= lo && j < hi && (!s.mask || s.mask[j] != 0); };
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j < hi; ++j)
      if (visible(j)) mx = std::max(mx, row[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < s.keys; ++j) sum += (row[j] = visible(j) ? fast_exp(row[j] - mx) : 0.0f);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < s.keys; ++j) row[j] *= inv;
  } else {  // no key in sight: uniform over the sequence, as HF's additive mask gives (keys = len)
    for (int64_t j = 0; j < s.len; ++j) row[j] = 1.0f / static_cast<float>(s.len);
  }
  for (int64_t j = s.keys; j < a.T; ++j) row[j] = 0.0f;
}

}  // namespace

// Per thread: the (T, keys) score gradients and dropped probabilities, and one row of dropout
// multipliers; the head size does not enter (the GEMMs read Q, K, V in place).
int64_t attention_workspace_per_thread(int64_t T) { return 2 * T * T + T; }

void attention_forward(const AttentionArgs& args, float* out, float* probs, const float* q,
                       const float* k, const float* v, float* workspace) {
  AttentionArgs a = args;
  resolve_micro(a.rng, a.row0);
  const int64_t T = a.T, H = a.spec.heads, D = a.spec.head_dim, G = a.group();
  const bool drop = a.dropout_p > 0.0f;
  for_each_unit(a.B * H, workspace, attention_workspace_per_thread(T), [&](int64_t u, float* ws) {
    const int64_t b = u / H, h = u % H, g = h / G;
    const Seq s = sequence(a, b);
    if (s.len == 0) return;
    const float* qh = q + s.start * a.ldq + h * D;
    const float* kg = k + s.start * a.ldk + g * D;
    const float* vg = v + s.start * a.ldv + g * D;
    float* P = probs + a.probs_row(s.start, s.len, h, 0) * T;  // (len, T), row stride T
    float* Pd = ws;                                            // (block, band) dropped P
    float* m = ws + T * T;                                     // (band) multipliers of one row
    const int64_t block = banded(a) ? kQueryBlock : s.len;
    VisibleScan scan{s.mask}, ahead{s.mask};
    for (int64_t i0 = 0; i0 < s.len; i0 += block) {
      const int64_t i1 = std::min(s.len, i0 + block), rows = i1 - i0;
      const Band band = key_band(a, s, i0, i1, ahead);
      const int64_t w = band.width();
      gemm(false, true, rows, w, D, a.spec.scale, qh + i0 * a.ldq, a.ldq, kg + band.c0 * a.ldk,
           a.ldk, 0.0f, P + i0 * T + band.c0, T);
      for (int64_t i = i0; i < i1; ++i) {
        float* row = P + i * T;
        softmax_row(a, s, i, scan, row);  // probabilities outside the band are 0
        if (drop) {
          dropout_multipliers(m, a.rng, a.stream_row(a.row0, b, h, i) + band.c0, w, a.dropout_p);
          for (int64_t j = 0; j < w; ++j) Pd[(i - i0) * w + j] = row[band.c0 + j] * m[j];
        }
      }
      gemm(false, false, rows, D, w, 1.0f, drop ? Pd : P + i0 * T + band.c0, drop ? w : T,
           vg + band.c0 * a.ldv, a.ldv, 0.0f, out + (s.start + i0) * a.ldo + h * D, a.ldo);
    }
  });
}

void attention_backward(const AttentionArgs& args, float* dq, float* dk, float* dv,
                        const float* dout, const float* q, const float* k, const float* v,
                        const float* probs, float* workspace) {
  AttentionArgs a = args;
  resolve_micro(a.rng, a.row0);
  const int64_t T = a.T, D = a.spec.head_dim, G = a.group();
  const float scale = a.spec.scale, cap = a.spec.softcap;
  const bool drop = a.dropout_p > 0.0f;
  for_each_unit(a.B * a.spec.kv_heads, workspace, attention_workspace_per_thread(T),
                [&](int64_t u, float* ws) {
    const int64_t b = u / a.spec.kv_heads, g = u % a.spec.kv_heads;
    const Seq s = sequence(a, b);
    if (s.len == 0) return;
    const int64_t keys = s.keys;
    const float* kg = k + s.start * a.ldk + g * D;
    const float* vg = v + s.start * a.ldv + g * D;
    float* dkg = dk + s.start * a.lddk + g * D;
    float* dvg = dv + s.start * a.lddv + g * D;
    float* dS = ws;             // (block, band): dP' = dO V^T, turned into dS in place
    float* Pd = ws + T * T;     // (block, band): dropped probabilities P', then (softcap) scores
    float* m = ws + 2 * T * T;  // (band): dropout multipliers of one row
    const int64_t block = banded(a) ? kQueryBlock : s.len;
    // Blocks add into dK and dV; one block (no band) writes them with the group's first head.
    if (block < s.len)
      for (int64_t j = 0; j < keys; ++j)
        for (int64_t d = 0; d < D; ++d) dkg[j * a.lddk + d] = dvg[j * a.lddv + d] = 0.0f;
    for (int64_t h = g * G; h < (g + 1) * G; ++h) {
      const float beta = h == g * G && block >= s.len ? 0.0f : 1.0f;
      const float* qh = q + s.start * a.ldq + h * D;
      const float* dO = dout + s.start * a.ldo + h * D;
      float* dqh = dq + s.start * a.lddq + h * D;
      const float* P = probs + a.probs_row(s.start, s.len, h, 0) * T;
      VisibleScan ahead{s.mask};
      for (int64_t i0 = 0; i0 < s.len; i0 += block) {
        const int64_t i1 = std::min(s.len, i0 + block), rows = i1 - i0;
        const Band band = key_band(a, s, i0, i1, ahead);
        const int64_t w = band.width(), c0 = band.c0;
        const float* kb = kg + c0 * a.ldk;
        gemm(false, true, rows, w, D, 1.0f, dO + i0 * a.ldo, a.ldo, vg + c0 * a.ldv, a.ldv, 0.0f,
             dS, w);
        for (int64_t i = i0; i < i1; ++i) {
          const float* prow = P + i * T + c0;
          float* drow = dS + (i - i0) * w;
          if (drop) {
            dropout_multipliers(m, a.rng, a.stream_row(a.row0, b, h, i) + c0, w, a.dropout_p);
            for (int64_t j = 0; j < w; ++j) {
              Pd[(i - i0) * w + j] = prow[j] * m[j];
              drow[j] *= m[j];
            }
          }
          float dot = 0.0f;
          for (int64_t j = 0; j < w; ++j) dot += prow[j] * drow[j];
          for (int64_t j = 0; j < w; ++j) drow[j] = prow[j] * (drow[j] - dot);
        }
        gemm(true, false, w, D, rows, 1.0f, drop ? Pd : P + i0 * T + c0, drop ? w : T,
             dO + i0 * a.ldo, a.ldo, beta, dvg + c0 * a.lddv, a.lddv);
        if (cap > 0.0f) {  // through s = cap tanh(x / cap): ds/dx = 1 - (s / cap)^2
          gemm(false, true, rows, w, D, scale, qh + i0 * a.ldq, a.ldq, kb, a.ldk, 0.0f, Pd, w);
          for (int64_t e = 0; e < rows * w; ++e) {
            const float t = std::tanh(Pd[e] / cap);
            dS[e] *= 1.0f - t * t;
          }
        }
        gemm(false, false, rows, D, w, scale, dS, w, kb, a.ldk, 0.0f, dqh + i0 * a.lddq, a.lddq);
        gemm(true, false, w, D, rows, scale, dS, w, qh + i0 * a.ldq, a.ldq, beta,
             dkg + c0 * a.lddk, a.lddk);
      }
    }
    // Keys past `keys` are padding no query attends to: zero gradients.
    for (int64_t j = keys; j < s.len; ++j)
      for (int64_t d = 0; d < D; ++d) dkg[j * a.lddk + d] = dvg[j * a.lddv + d] = 0.0f;
  });
}

}  // namespace ftune::cpu
