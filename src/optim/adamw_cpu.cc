// AdamW's elementwise update on the CPU, split across threads (see adamw.h for the equations),
// with the optional bf16 / f16 shadow of the updated weights.
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
        for (int64_t i = b; i < e; ++i) {
          const float gi = g[i] * grad_scale;
          if (weight_decay != 0.0f) p[i] *= 1.0f - lr * weight_decay;
          m[i] += (gi - m[i]) * (1.0f - beta1);  // torch: exp_avg.lerp_(grad, 1 - beta1)
          v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
          const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
          p[i] -= step_size * m[i] / denom;
          if (shadow_bf16) shadow_bf16[i] = float_to_bf16(p[i]);
          if (shadow_f16) shadow_f16[i] = float_to_f16(p[i]);
        }
      },
      4096);
}

}  // namespace ftune::cpu
