// Low-level CPU routines shared by the ops: GEMM through OpenBLAS and a few vector helpers.
// Row-major everywhere, as in the rest of ftune.
//
// OpenBLAS always runs single-threaded; gemm() threads a large product itself by cutting the
// output into one block of rows (or columns) per compute thread. OpenBLAS's own thread pool
// busy-waits between calls and would compete with the compute threads for the cores during every
// elementwise op; with one pool for everything, a core is either doing GEMM or our work. Inside a
// parallel_for region (attention heads), gemm() runs on the calling thread only.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace ftune::cpu {

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, op = transpose when trans_* is set.
// A is (M, K) or, transposed, stored (K, M); B is (K, N) or, transposed, stored (N, K).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[j] += sum_i inp[i, j] over rows: the bias gradient of a linear layer (deterministic).
void add_column_sums(float* out, const float* inp, int64_t rows, int64_t cols);

// Runs fn(unit, thread_workspace) for every unit in [0, units), one static block of units per
// compute thread, each thread on its own per_thread floats of `workspace` (attention's
// (sequence, head) units; the GEMMs inside run on the calling thread).
template <typename Fn>
void for_each_unit(int64_t units, float* workspace, int64_t per_thread, Fn fn) {
  const int threads = compute_threads();
  compute_pool().parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* ws = workspace + t * per_thread;
      for (int64_t u = units * t / threads; u < units * (t + 1) / threads; ++u) fn(u, ws);
    }
  });
}

}  // namespace ftune::cpu
