// RoPE on the CPU: tokens split across threads, each token's angles computed once for its heads.
#include <cmath>

#include "core/thread_pool.h"
#include "ops/rope.h"

namespace ftune::cpu {

void rope_rotate(float* x, const int32_t* positions, const float* inv_freq, const RopeRows& r,
                 float scaling, float sign) {
  const int64_t half = r.rotary_dim / 2;
  parallel_for(
      r.N,
      [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
          const float pos = static_cast<float>(positions[n]);
          for (int64_t i = 0; i < half; ++i) {
            const float a = pos * inv_freq[i];
            const float c = std::cos(a) * scaling, s = sign * std::sin(a) * scaling;
            for (int64_t h = 0; h < r.heads; ++h) {
              float* xh = x + n * r.ld + h * r.head_dim;
              const float x1 = xh[i], x2 = xh[i + half];
              xh[i] = x1 * c - x2 * s;
              xh[i + half] = x2 * c + x1 * s;
            }
          }
        }
      },
      4);
}

}  // namespace ftune::cpu
