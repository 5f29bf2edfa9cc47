// Residual add on the CPU.
#include "core/thread_pool.h"
#include "ops/residual.h"

namespace ftune::cpu {

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  parallel_for(
      n,
      [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) out[i] = a[i] + b[i];
      },
      8192);
}

}  // namespace ftune::cpu
