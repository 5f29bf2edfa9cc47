// Gradient norm on the CPU. The sum is split into one static chunk per thread, each
// summed in double, and the partial sums are added in chunk order: reproducible for a thread count.
// Within a chunk, element i adds into lane i % kLanes (fixed lanes a vector loop keeps in
// registers; a single running double was a loop-carried add of 4 cycles an element: 64-76 ms over
// MiniLM's 22.7M gradients on one thread), the lanes added in order at the end.
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
      constexpr int kLanes = 16;
      double lane[kLanes] = {};
      const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
      int64_t i = begin;
      for (; i + kLanes <= end; i += kLanes) {
#pragma omp simd
        for (int k = 0; k < kLanes; ++k) lane[k] += double(x[i + k]) * double(x[i + k]);
      }
      for (int k = 0; i < end; ++i, ++k) lane[k] += double(x[i]) * double(x[i]);
      double s = 0.0;
      for (int k = 0; k < kLanes; ++k) s += lane[k];
      partial[c] = s;
    }
  });
  double total = 0.0;
  for (int c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace ftune::cpu
