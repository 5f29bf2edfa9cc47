// OpenBLAS's buffers under an address-space limit (see blas_buffers.h).
#include "core/blas_buffers.h"

#include <cblas.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/openblas_core.h"
#include "core/thread_pool.h"

namespace ftune {
namespace {

std::string mib(int64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

// Waits until `count` reaches `target` (every pool thread is inside the warm-up at once).
void arrive_and_wait(std::atomic<int>& count, int target) {
  count.fetch_add(1);
  while (count.load() < target) std::this_thread::yield();
}

}  // namespace

void reexec_with_blas_settings(char** argv) {
  bool changed = false;
  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    changed |= ::setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const std::string core = openblas_core_upgrade_here();
    if (!core.empty()) changed |= ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1) == 0;
  }
  if (!changed) return;
  ::execv("/proc/self/exe", argv);
  // The exec failed (no /proc): go on with OpenBLAS as it started.
}

void reserve_blas_buffers(ThreadPool& pool) {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  const int threads = pool.num_threads();
  const int64_t need = kBlasBufferBytes * threads;
  // Probe: can the address space take every thread's buffer at once?
  void* probe = ::mmap(nullptr, static_cast<size_t>(need), PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED)
    throw OutOfMemoryError(
        "the address-space limit (ulimit -v " + std::to_string(lim.rlim_cur >> 10) +
        " KiB) leaves no room for the BLAS: OpenBLAS maps " + mib(kBlasBufferBytes) +
        " per compute thread (" + std::to_string(threads) + " threads: " + mib(need) +
        ") before any model memory; raise the limit" +
        (threads > 1 ? std::string(" or use fewer threads") : std::string()));
  ::munmap(probe, static_cast<size_t>(need));
  // Every thread runs a 1 x 1 GEMM while all the others are inside theirs too, so OpenBLAS maps
  // one buffer per thread now (it keeps them for later calls) rather than at a later GEMM that
  // would find the address space taken by the model.
  if (in_parallel_region()) return;  // a nested region runs serially: no threads to warm
  std::atomic<int> entered{0}, done{0};
  pool.parallel_for(threads, [&](int64_t, int64_t) {
    arrive_and_wait(entered, threads);
    const float a = 1, b = 1;
    float c = 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c,
                1);
    arrive_and_wait(done, threads);
  });
}

}  // namespace ftune
