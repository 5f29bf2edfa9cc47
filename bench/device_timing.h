// Timing a call on a device for the micro-benchmarks: warm-up, then reps calls between two
// device synchronisations; on the CPU, the median of reps timed calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "core/device.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

namespace ftune::bench {

inline void sync(Device dev) {
#ifdef FTUNE_WITH_CUDA
  if (!dev.is_cpu()) cuda::synchronize(dev);
#else
  (void)dev;
#endif
}

// Seconds per call of fn, over reps calls after 2 untimed ones.
inline double time_call(Device dev, const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 2; ++i) fn();
  sync(dev);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  sync(dev);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// The median seconds of reps timed calls of fn (on the host clock), after one untimed call.
inline double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace ftune::bench
