// Low-level CPU routines shared by the ops: GEMM through OpenBLAS or oneDNN
// (ops/cpu_gemm_library.h) and a few vector helpers. Row-major everywhere, as in the rest of ftune.
//
// The GEMM library always runs single-threaded; gemm() threads a large product itself by cutting
// the output into one block of rows (or columns) per compute thread. OpenBLAS's own thread pool
// busy-waits between calls and would compete with the compute threads for the cores during every
// elementwise op; with one pool for everything, a core is either doing GEMM or our work. Inside a
// parallel_for region (attention heads), gemm() runs on the calling thread only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/column_order.h"
#include "core/thread_pool.h"

namespace ftune::cpu {

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, op = transpose when trans_* is set.
// A is (M, K) or, transposed, stored (K, M); B is (K, N) or, transposed, stored (N, K).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[j] += sum_i inp[i, j] over rows: the bias gradient of a linear layer, in the fixed order
// of core/column_order.h (the same bits as the CUDA twin, for any thread count).
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

// Column sums of NV values per element in the fixed order of core/column_order.h:
// value(r, c, v) writes element (r, c)'s NV values into v; finish(c, total) receives column c's NV
// totals. Threaded over blocks of columns, so each column is summed in that order whatever the
// thread count. (The CUDA twin is cuda/column_reduce.cuh.)
template <int NV, typename Value, typename Finish>
void column_reduce(int64_t rows, int64_t cols, const Value& value, const Finish& finish) {
  // Blocks of columns as wide as the thread count allows (long contiguous runs of each row), at
  // most kMaxTile; the width does not change any column's order of additions.
  constexpr int64_t kMaxTile = 256;
  const int64_t threads = compute_threads();
  const int64_t tile = std::clamp<int64_t>(((cols + threads - 1) / threads + 15) / 16 * 16, 16,
                                           kMaxTile);
  const int64_t chunk = column_chunk_rows(rows, cols * NV);
  parallel_for(
      (cols + tile - 1) / tile,
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t c0 = t * tile, w = std::min(tile, cols - c0);
          float total[kMaxTile][NV] = {};
          int64_t s = 0;
          do {  // every chunk, and one (empty) chunk when there are no rows
            float lane[kColumnLanes][kMaxTile][NV] = {};
            const int64_t e = std::min(rows, s + chunk);
            for (int64_t r = s; r < e; ++r) {
              float(*acc)[NV] = lane[(r - s) % kColumnLanes];
              for (int64_t i = 0; i < w; ++i) {
                float v[NV];
                value(r, c0 + i, v);
                for (int k = 0; k < NV; ++k) acc[i][k] += v[k];
              }
            }
            for (int64_t i = 0; i < w; ++i)
              for (int k = 0; k < NV; ++k) {
                float partial = 0.0f;
                for (int l = 0; l < kColumnLanes; ++l) partial += lane[l][i][k];
                total[i][k] += partial;
              }
            s += chunk;
          } while (s < rows);
          for (int64_t i = 0; i < w; ++i) finish(c0 + i, total[i]);
        }
      },
      1);
}

}  // namespace ftune::cpu
