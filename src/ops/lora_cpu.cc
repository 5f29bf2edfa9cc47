// LoRA / DoRA on the CPU: the low-rank products go through gemm(); the DoRA column scalings are
// plain loops threaded over rows (forward), and the magnitude gradient a column sum in the fixed
// order of core/column_order.h (backward: the same whatever the thread count). Backward through
// adapter dropout draws the multipliers once, tile by tile of a row, for both x_d (dA's input) and
// the input gradient (h A, by a loop over the rank), where a GEMM and two dropout passes over
// (N, C) drew them twice.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/dropout.h"
#include "ops/lora.h"
#include "ops/primitives_cpu.h"

namespace ftune::cpu {
namespace {

// Columns of a row per pass of the backward through the adapter's dropout.
constexpr int64_t kDropoutTile = 256;

// t[j] = sum_k h[k] a[k * lda + j] for j in [0, w): w columns of one row of h (1, r) @ A (r, C).
void low_rank_row(float* __restrict t, const float* __restrict h, const float* __restrict a,
                  int64_t lda, int64_t r, int64_t w) {
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) t[j] = 0.0f;
  for (int64_t k = 0; k < r; ++k) {
    const float hk = h[k];
    const float* ak = a + k * lda;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) t[j] += hk * ak[j];
  }
}

}  // namespace

void lora_forward(float* out, int64_t ldo, float* u, const float* inp, int64_t ldi, const float* a,
                  const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale, float p,
                  RngKey rng, DropoutRuns runs, float* scratch) {
  if (p > 0.0f) {
    dropout_apply(scratch, inp, N * C, p, rng, runs);  // inp is contiguous here (checked)
    inp = scratch;
    ldi = C;
  }
  // u (N, r) = x_d (N, C) @ A^T (C, r)
  gemm(false, true, N, r, C, 1.0f, inp, ldi, a, C, 0.0f, u, r);
  // out (N, OC) += s * u (N, r) @ B^T (r, OC)
  gemm(false, true, N, OC, r, scale, u, r, b, r, 1.0f, out, ldo);
}

void lora_backward(float* dinp, int64_t lddi, float* da, float* db, float* h, const float* dout,
                   int64_t lddo, const float* inp, int64_t ldi, const float* u, const float* a,
                   const float* b, int64_t N, int64_t C, int64_t OC, int64_t r, float scale,
                   bool accumulate_dinp, float p, RngKey rng, DropoutRuns runs, float* scratch) {
  // dB (OC, r) += s * dout^T (OC, N) @ u (N, r)
  if (db) gemm(true, false, OC, r, N, scale, dout, lddo, u, r, 1.0f, db, r);
  // h (N, r) = s * dout (N, OC) @ B (OC, r)
  gemm(false, false, N, r, OC, scale, dout, lddo, b, r, 0.0f, h, r);
  if (p == 0.0f) {
    // dA (r, C) += h^T (r, N) @ x (N, C)
    if (da) gemm(true, false, r, C, N, 1.0f, h, r, inp, ldi, 1.0f, da, C);
    // dinp (N, C) (+)= h (N, r) @ A (r, C)
    if (dinp)
      gemm(false, false, N, C, r, 1.0f, h, r, a, C, accumulate_dinp ? 1.0f : 0.0f, dinp, lddi);
    return;
  }
  // Through the dropout, its multipliers drawn once: scratch = x_d (for dA) and
  // dinp (+)= dropout'(h A), tile by tile of a row.
  if (!da && !dinp) return;
  resolve_micro(rng, runs);
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        alignas(64) float m[kDropoutTile], t[kDropoutTile];
        for (int64_t row = r0; row < r1; ++row)
          for (int64_t c0 = 0; c0 < C; c0 += kDropoutTile) {
            const int64_t w = std::min(kDropoutTile, C - c0);
            dropout_element_multipliers(m, rng, runs, row * C + c0, w, p);
            const float* x = inp + row * ldi + c0;
            float* xd = scratch + row * C + c0;
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) xd[j] = x[j] * m[j];
            if (!dinp) continue;
            low_rank_row(t, h + row * r, a + c0, C, r, w);
            float* d = dinp + row * lddi + c0;
            if (accumulate_dinp) {
#pragma omp simd
              for (int64_t j = 0; j < w; ++j) d[j] += t[j] * m[j];
            } else {
#pragma omp simd
              for (int64_t j = 0; j < w; ++j) d[j] = t[j] * m[j];
            }
          }
      },
      4);
  // dA (r, C) += h^T (r, N) @ x_d (N, C)
  if (da) gemm(true, false, r, C, N, 1.0f, h, r, scratch, C, 1.0f, da, C);
}

void row_sq_norms(float* wsq, const float* w, int64_t OC, int64_t C) {
  parallel_for(
      OC,
      [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          double acc = 0.0;
          for (int64_t c = 0; c < C; ++c) acc += double(w[o * C + c]) * w[o * C + c];
          wsq[o] = static_cast<float>(acc);
        }
      },
      16);
}

void dora_norms(float* norm, const float* wsq, const float* w, const float* a, const float* b,
                int64_t OC, int64_t C, int64_t r, float scale, float* workspace) {
  float* wa = workspace;            // (OC, r) = W A^T
  float* aat = workspace + OC * r;  // (r, r)  = A A^T
  gemm(false, true, OC, r, C, 1.0f, w, C, a, C, 0.0f, wa, r);
  gemm(false, true, r, r, C, 1.0f, a, C, a, C, 0.0f, aat, r);
  parallel_for(
      OC,
      [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          const float* bo = b + o * r;
          double cross = 0.0, low = 0.0;
          for (int64_t k = 0; k < r; ++k) {
            cross += double(bo[k]) * wa[o * r + k];
            double t = 0.0;
            for (int64_t j = 0; j < r; ++j) t += double(aat[k * r + j]) * bo[j];
            low += double(bo[k]) * t;
          }
          const double sq = double(wsq[o]) + 2.0 * scale * cross + double(scale) * scale * low;
          norm[o] = static_cast<float>(std::sqrt(std::max(sq, 0.0)));
        }
      },
      16);
}

void dora_strip_bias(float* z, int64_t ldz, const float* out, int64_t ldo, const float* bias,
                     int64_t N, int64_t OC) {
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t o = 0; o < OC; ++o)
            z[r * ldz + o] = bias ? out[r * ldo + o] - bias[o] : out[r * ldo + o];
      },
      16);
}

namespace {

// y = bias + (m/n) z (DoRA), or y += (m/n - 1) z (DoRA with adapter dropout: y holds the rest).
// Row by row, streaming through memory (the outputs are far larger than any cache).
template <bool kDropout>
void dora_output_rows(float* out, int64_t ldo, const float* z, int64_t ldz, const float* bias,
                      const float* m, const float* norm, int64_t N, int64_t OC) {
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* y = out + r * ldo;
          const float* zr = z + r * ldz;
#pragma omp simd
          for (int64_t o = 0; o < OC; ++o) {
            if constexpr (kDropout)
              y[o] += (m[o] / norm[o] - 1.0f) * zr[o];
            else
              y[o] = (bias ? bias[o] : 0.0f) + m[o] / norm[o] * zr[o];
          }
        }
      },
      16);
}

// dm += colsum(dout * z) / n, then dout *= m/n in place (DoRA), or z := (m/n - 1) dout (DoRA with
// adapter dropout; dout unchanged). The magnitude gradient is a column sum in the fixed order of
// core/column_order.h (the CUDA twin's, for any thread count); each element is updated as it is
// read (once).
template <bool kDropout>
void dora_output_columns(float* dm, float* dout, int64_t lddo, float* z, int64_t ldz,
                         const float* m, const float* norm, int64_t N, int64_t OC) {
  column_reduce<1>(
      N, OC,
      [&](int64_t r, int64_t o, float* v) {
        float* d = dout + r * lddo + o;
        float* zr = z + r * ldz + o;
        v[0] = *d * *zr;
        if constexpr (kDropout)
          *zr = (m[o] / norm[o] - 1.0f) * *d;
        else
          *d *= m[o] / norm[o];
      },
      [&](int64_t o, const float* total) {
        if (dm) dm[o] += total[0] / norm[o];
      });
}

}  // namespace

void dora_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz, const float* bias,
                         const float* m, const float* norm, int64_t N, int64_t OC) {
  dora_output_rows<false>(out, ldo, z, ldz, bias, m, norm, N, OC);
}

void dora_output_backward(float* dm, float* dout, int64_t lddo, const float* z, int64_t ldz,
                          const float* m, const float* norm, int64_t N, int64_t OC) {
  dora_output_columns<false>(dm, dout, lddo, const_cast<float*>(z), ldz, m, norm, N, OC);
}

void dora_dropout_output_forward(float* out, int64_t ldo, const float* z, int64_t ldz,
                                 const float* m, const float* norm, int64_t N, int64_t OC) {
  dora_output_rows<true>(out, ldo, z, ldz, nullptr, m, norm, N, OC);
}

void dora_dropout_output_backward(float* dm, float* z, int64_t ldz, const float* dout,
                                  int64_t lddo, const float* m, const float* norm, int64_t N,
                                  int64_t OC) {
  dora_output_columns<true>(dm, const_cast<float*>(dout), lddo, z, ldz, m, norm, N, OC);
}

}  // namespace ftune::cpu
