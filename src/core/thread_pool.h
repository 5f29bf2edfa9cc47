// A fixed pool of compute threads with a static parallel_for: [0, n) is cut into one contiguous
// chunk per thread, always the same way for a given thread count, so floating-point results are
// reproducible run to run (exact resume relies on it). The caller runs chunk 0 itself. Nested
// calls from inside a chunk run serially. The ops use this pool for their outer loops (rows,
// heads, batch items) and to split GEMMs (ops/primitives_cpu.h), the tokenizer for its batch API.
//
// Between regions a worker spins for kSpinMicros before it sleeps on a condition variable, and
// the caller spins as long for the workers to finish: a training step opens thousands of short
// regions (a LoRA product is ~0.1 ms), and waking a sleeping thread costs ~40 us on the
// development VM, where a spinning one starts within a microsecond. A pool idle longer than that
// sleeps and costs nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ftune {

class ThreadPool {
 public:
  static constexpr int64_t kSpinMicros = 100;

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over contiguous chunks of [0, n), at least min_chunk items each (except
  // when n is smaller), and blocks until all are done. The first exception thrown by any chunk is
  // rethrown here after every chunk has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

  // Runs fn(i) for i in [0, num_tasks) with tasks handed out dynamically (for work of uneven
  // cost, e.g. tokenizing texts of different lengths); results must not depend on the order.
  void parallel_tasks(int64_t num_tasks, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_chunks(int num_chunks);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  // Bumped (under mu_) when a region starts; workers spin on it a while before sleeping.
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  int num_chunks_ = 0;
  std::atomic<int> pending_{0};  // chunks of the region not finished; the caller spins on it too
  std::function<void(int)> job_;  // runs chunk i
  std::exception_ptr error_;
  std::mutex call_mu_;  // one parallel region at a time
};

// True on a pool worker, and on a caller while it runs its own chunk of a parallel region: work
// started there runs serially on this thread.
bool in_parallel_region();

// The process-wide compute pool (created on first use with the configured thread count).
ThreadPool& compute_pool();
// Sets the compute thread count (ops and OpenBLAS); 0 means all hardware threads.
void set_compute_threads(int num_threads);
int compute_threads();

// Convenience wrapper over compute_pool().parallel_for.
inline void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                         int64_t min_chunk = 1) {
  compute_pool().parallel_for(n, fn, min_chunk);
}

}  // namespace ftune
