// AdamW's elementwise update on the CPU, split across threads (see adamw.h for the equations),
// with the optional bf16 / f16 shadow of the updated weights. The update is one SIMD loop (the
// tests inside it and possible aliasing kept it scalar: 10-15 % of a MiniLM step), the shadows
// a second pass over the same block while it is in cache.
#include <cmath>

#include "core/thread_pool.h"
#include "optim/adamw.h"

namespace ftune::cpu {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                  float weight_decay, float beta1, float beta2, float eps, float step_size,
                  float bias_correction2_sqrt, float grad_scale, bf16_t* shadow_bf16,
                  f16_t* shadow_f16) {
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        float* __restrict pb = p + b;
        const float* __restrict gb = g + b;
        float* __restrict mb = m + b;
        float* __restrict vb = v + b;
        const int64_t len = e - b;
        // Without weight decay the factor is exactly 1: p * 1 = p, the same bits as no multiply.
        const float decay = weight_decay != 0.0f ? 1.0f - lr * weight_decay : 1.0f;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) {
          const float gi = gb[i] * grad_scale;
          const float pi = pb[i] * decay;
          const float mi = mb[i] + (gi - mb[i]) * (1.0f - beta1);  // torch: exp_avg.lerp_
          const float vi = vb[i] * beta2 + (1.0f - beta2) * gi * gi;
          const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
          mb[i] = mi;
          vb[i] = vi;
          pb[i] = pi - step_size * mi / denom;
        }
        if (shadow_bf16)
          for (int64_t i = b; i < e; ++i) shadow_bf16[i] = float_to_bf16(p[i]);
        if (shadow_f16)
          for (int64_t i = b; i < e; ++i) shadow_f16[i] = float_to_f16(p[i]);
      },
      4096);
}

}  // namespace ftune::cpu
