// Scaling in place on the CPU (see scale.h).
#include "core/thread_pool.h"
#include "ops/scale.h"

namespace ftune::cpu {

void scale_inplace(float* x, int64_t n, float alpha) {
  parallel_for(
      n,
      [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) x[i] *= alpha;
      },
      8192);
}

}  // namespace ftune::cpu
