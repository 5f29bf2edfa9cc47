// Dropout on the CPU: one Philox block per four elements; chunks start on multiples of four so
// every block is drawn by exactly one thread.
#include "core/thread_pool.h"
#include "ops/dropout.h"

namespace ftune::cpu {

void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng) {
  if (p == 0.0f) {
    if (out != inp)
      parallel_for(n, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) out[i] = inp[i]; }, 4096);
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  const int64_t groups = (n + 3) / 4;
  parallel_for(groups, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const Philox4 r = philox_block(rng, static_cast<uint64_t>(g));
      for (int k = 0; k < 4; ++k) {
        const int64_t i = g * 4 + k;
        if (i >= n) break;
        out[i] = philox_uniform(r.v[k]) >= p ? inp[i] * scale : 0.0f;
      }
    }
  }, 1024);
}

}  // namespace ftune::cpu
