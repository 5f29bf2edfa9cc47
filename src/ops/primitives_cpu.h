// Low-level CPU routines shared by the ops: GEMM through OpenBLAS (threaded by OpenBLAS itself)
// and a few vector helpers. Row-major everywhere, as in the rest of ftune.
#pragma once

#include <cstdint>

namespace ftune::cpu {

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, op = transpose when trans_* is set.
// A is (M, K) or, transposed, stored (K, M); B is (K, N) or, transposed, stored (N, K).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// While alive, OpenBLAS runs single-threaded, so that gemm() may be called from inside a
// parallel_for region (one small GEMM per attention head per thread); restores the compute thread
// count afterwards.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;
};

// out[j] += sum_i inp[i, j] over rows: the bias gradient of a linear layer (deterministic).
void add_column_sums(float* out, const float* inp, int64_t rows, int64_t cols);

}  // namespace ftune::cpu
