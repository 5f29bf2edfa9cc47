// Thread pool implementation: workers spin a while, then sleep on a condition variable, between
// parallel regions (core/thread_pool.h).
#include "core/thread_pool.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "core/blas_buffers.h"
#include "core/float_env.h"
#include "core/signal_stack.h"

// OpenBLAS runs single-threaded: ops/primitives_cpu.cc splits large GEMMs over this pool.
extern "C" void openblas_set_num_threads(int num_threads);

namespace ftune {
namespace {

thread_local bool t_inside_region = false;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or kSpinMicros have passed; returns done().
template <typename Done>
bool spin_until(Done done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

bool in_parallel_region() {
  return t_inside_region;
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  enable_flush_to_zero();
  // A signal that arrives while this worker runs a GEMM kernel is handled here (signal_stack.h).
  use_alternate_signal_stack();
  t_inside_region = true;  // a worker never opens a nested region
  uint64_t seen = 0;
  for (;;) {
    std::function<void(int)>* job;
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      if (index >= num_chunks_) continue;
      job = &job_;
    }
    try {
      (*job)(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be about to sleep: no lost wake-up
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run_chunks(int num_chunks) {
  enable_flush_to_zero();  // the caller computes chunk 0 under the same float mode as workers
  {
    std::lock_guard<std::mutex> lock(mu_);
    num_chunks_ = num_chunks;
    pending_.store(num_chunks - 1, std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  t_inside_region = true;
  try {
    job_(0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
  t_inside_region = false;
  const auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  spin_until(finished);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, finished);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
  if (n <= 0) return;
  if (min_chunk < 1) min_chunk = 1;
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  const int chunks = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  if (chunks <= 1 || t_inside_region) {
    enable_flush_to_zero();
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  job_ = [&](int i) { fn(n * i / chunks, n * (i + 1) / chunks); };
  run_chunks(chunks);
}

void ThreadPool::parallel_tasks(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  const int chunks = static_cast<int>(std::min<int64_t>(num_threads(), num_tasks));
  if (chunks <= 1 || t_inside_region) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  std::atomic<int64_t> next{0};
  job_ = [&](int) {
    for (int64_t i = next.fetch_add(1); i < num_tasks; i = next.fetch_add(1)) fn(i);
  };
  run_chunks(chunks);
}

namespace {

std::mutex g_pool_mu;
int g_threads = 0;  // 0: all hardware threads
std::unique_ptr<ThreadPool> g_pool;

// "All cores": the CPUs this process may run on (its affinity mask: taskset, a cgroup's cpuset,
// a search worker pinned to its share, hpo/worker_group.h), else the machine's.
int resolved_threads() {
  if (g_threads > 0) return g_threads;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

}  // namespace

ThreadPool& compute_pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    enable_flush_to_zero();
    g_pool = std::make_unique<ThreadPool>(resolved_threads());
    openblas_set_num_threads(1);
    reserve_blas_buffers(*g_pool);  // under ulimit -v: room checked, buffers mapped now
  }
  return *g_pool;
}

void set_compute_threads(int num_threads) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_threads = num_threads < 0 ? 0 : num_threads;
  enable_flush_to_zero();
  g_pool = std::make_unique<ThreadPool>(resolved_threads());
  openblas_set_num_threads(1);
  reserve_blas_buffers(*g_pool);
}

int compute_threads() {
  return compute_pool().num_threads();
}

}  // namespace ftune
