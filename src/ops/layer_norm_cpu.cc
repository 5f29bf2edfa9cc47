// Layer norm on the CPU. Rows are independent and split across threads; the parameter gradients
// are column sums in the fixed order of core/column_order.h, so no result depends on the thread
// count.
#include <cmath>

#include "core/thread_pool.h"
#include "ops/layer_norm.h"
#include "ops/primitives_cpu.h"

namespace ftune::cpu {

void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* a,
                        const float* b, float* sum, const float* weight, const float* bias,
                        int64_t N, int64_t C, float eps, bf16_t* out_bf16, f16_t* out_f16) {
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* x;
          if (sum) {  // fused residual add: x = a + b, kept for the backward pass
            float* s = sum + r * C;
            const float* ar = a + r * C;
            const float* br = b + r * C;
            for (int64_t c = 0; c < C; ++c) s[c] = ar[c] + br[c];
            x = s;
          } else {
            x = inp + r * C;
          }
          float m = 0.0f;
#pragma omp simd reduction(+ : m)
          for (int64_t c = 0; c < C; ++c) m += x[c];
          m /= static_cast<float>(C);
          float v = 0.0f;  // biased variance, as PyTorch
#pragma omp simd reduction(+ : v)
          for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
          v /= static_cast<float>(C);
          const float rs = 1.0f / std::sqrt(v + eps);
          float* o = out + r * C;
          if (bias)
            for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * rs * weight[c] + bias[c];
          else
            for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * rs * weight[c];
          if (out_bf16)  // the 16-bit copy, rounded from the stored fp32 value (as cast)
            for (int64_t c = 0; c < C; ++c) out_bf16[r * C + c] = float_to_bf16(o[c]);
          if (out_f16)
            for (int64_t c = 0; c < C; ++c) out_f16[r * C + c] = float_to_f16(o[c]);
          mean[r] = m;
          rstd[r] = rs;
        }
      },
      8);
}

namespace {

// One row's input gradient; dx may alias dy element for element. A function of its own: inlined
// into the loop over rows, GCC vectorised the row's reduction with gathers (~10x slower).
void layer_norm_row_backward(float* dx, const float* dy, const float* __restrict x,
                             const float* __restrict weight, float m, float rs, int64_t C) {
  float mean_g = 0.0f, mean_gx = 0.0f;
#pragma omp simd reduction(+ : mean_g, mean_gx)
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * rs;
    const float g = dy[c] * weight[c];
    mean_g += g;
    mean_gx += g * xhat;
  }
  mean_g /= static_cast<float>(C);
  mean_gx /= static_cast<float>(C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * rs;
    dx[c] = rs * (dy[c] * weight[c] - mean_g - xhat * mean_gx);
  }
}

}  // namespace

void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int64_t N, int64_t C) {
  // With xhat = (x - mean) * rstd and g = dout * weight:
  //   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat))   row by row;
  //   dweight += sum over rows of dout * xhat, dbias += sum over rows of dout, in the fixed order
  //   of core/column_order.h (the CUDA twin's, independent of the thread count).
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          layer_norm_row_backward(dinp + r * C, dout + r * C, inp + r * C, weight, mean[r],
                                  rstd[r], C);
      },
      8);
  if (!dweight) return;
  column_reduce<2>(
      N, C,
      [&](int64_t r, int64_t c, float* v) {
        const float dy = dout[r * C + c];
        v[0] = dy * ((inp[r * C + c] - mean[r]) * rstd[r]);
        v[1] = dy;
      },
      [&](int64_t c, const float* total) {
        dweight[c] += total[0];
        if (dbias) dbias[c] += total[1];
      });
}

}  // namespace ftune::cpu
