// CPU primitives: OpenBLAS sgemm behind a row-major wrapper, column sums threaded over columns.
#include "ops/primitives_cpu.h"

#include <cblas.h>

#include "core/thread_pool.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace ftune::cpu {

SingleThreadedBlas::SingleThreadedBlas() { openblas_set_num_threads(1); }
SingleThreadedBlas::~SingleThreadedBlas() { openblas_set_num_threads(compute_threads()); }

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void add_column_sums(float* out, const float* inp, int64_t rows, int64_t cols) {
  // Each thread owns a block of columns and sums rows in order: the result does not depend on the
  // thread count.
  parallel_for(
      cols,
      [&](int64_t c0, int64_t c1) {
        for (int64_t r = 0; r < rows; ++r) {
          const float* row = inp + r * cols;
          for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
        }
      },
      64);
}

}  // namespace ftune::cpu
