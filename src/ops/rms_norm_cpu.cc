// RMSNorm on the CPU: rows split across threads; the weight gradient through per-thread partial
// sums added in thread order (ops/rms_norm.h).
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/rms_norm.h"

namespace ftune::cpu {

void rms_norm_forward(float* out, int64_t ldo, float* rstd, const float* inp, int64_t ldi,
                      const float* weight, const RmsNormRows& r, float eps, float offset) {
  const int64_t C = r.C;
  parallel_for(
      r.N * r.heads,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t n = i / r.heads, h = i % r.heads;
          const float* x = inp + n * ldi + h * C;
          float* o = out + n * ldo + h * C;
          float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
          for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
          const float rs = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) o[c] = x[c] * rs * (offset + weight[c]);
          rstd[i] = rs;
        }
      },
      8);
}

namespace {

// One row's input gradient (dx may alias dy, element for element) and, when pw is set, its
// weight-gradient terms added into pw. A function of its own: inlined into the loop over rows,
// GCC vectorised the row's reduction with gathers (1.1 ms for 512 x 768 rows, now 0.11 ms).
void rms_norm_row_backward(float* dx, const float* dy, const float* __restrict x,
                           const float* __restrict w, float rs, float offset, int64_t C,
                           float* __restrict pw) {
  float mean_gx = 0.0f;
#pragma omp simd reduction(+ : mean_gx)
  for (int64_t c = 0; c < C; ++c) mean_gx += dy[c] * (offset + w[c]) * x[c] * rs;
  mean_gx /= static_cast<float>(C);
  if (pw) {  // before dx: dinp may alias dout
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) pw[c] += dy[c] * x[c] * rs;
  }
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = x[c] * rs;
    dx[c] = rs * (dy[c] * (offset + w[c]) - xhat * mean_gx);
  }
}

}  // namespace

void rms_norm_backward(float* dinp, int64_t lddi, float* dweight, const float* dout, int64_t lddo,
                       const float* inp, int64_t ldi, const float* weight, const float* rstd,
                       const RmsNormRows& r, float offset, float* workspace) {
  const int64_t C = r.C, rows = r.N * r.heads;
  const int threads = compute_threads();
  compute_pool().parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = rows * t / threads, i1 = rows * (t + 1) / threads;
      float* pw = dweight ? workspace + t * C : nullptr;
      if (pw) std::fill(pw, pw + C, 0.0f);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = i / r.heads, h = i % r.heads;
        rms_norm_row_backward(dinp + n * lddi + h * C, dout + n * lddo + h * C,
                              inp + n * ldi + h * C, weight, rstd[i], offset, C, pw);
      }
    }
  });
  if (!dweight) return;
  for (int t = 0; t < threads; ++t)
    for (int64_t c = 0; c < C; ++c) dweight[c] += workspace[static_cast<int64_t>(t) * C + c];
}

}  // namespace ftune::cpu
