// Gradient norm on the CPU. The sum is split into one static chunk per thread, each
// summed in double, and the partial sums are added in chunk order: reproducible for a thread count.
#include <vector>

#include "core/thread_pool.h"
#include "optim/grad_clip.h"

namespace ftune::cpu {

double sum_of_squares(const float* x, int64_t n) {
  const int threads = compute_threads();
  double partial[256] = {};
  const int chunks = std::min(threads, 256);
  compute_pool().parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0.0;
      for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i)
        s += double(x[i]) * double(x[i]);
      partial[c] = s;
    }
  });
  double total = 0.0;
  for (int c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace ftune::cpu
