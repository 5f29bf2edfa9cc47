// CPU primitives: the row-major GEMM split over the compute threads (each block through the
// library of ops/cpu_gemm_library.h), column sums in the fixed order.
#include "ops/primitives_cpu.h"

#include <algorithm>

#include "core/op_profile.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"

namespace ftune::cpu {
namespace {

constexpr auto sgemm = serial_gemm;

// Below this many multiply-adds a product is not worth splitting across threads.
constexpr int64_t kSplitWork = int64_t{1} << 21;
// Block boundaries fall on multiples of the register tile, so every block runs full tiles.
constexpr int64_t kTile = 16;

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const profile::OpScope scope("gemm", Device::cpu());
  const int threads = compute_threads();
  if (threads == 1 || M * N * K < kSplitWork || in_parallel_region()) {
    sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Cut the larger output dimension into one block per thread. Rows of C come from rows of op(A)
  // (A stored transposed: columns), columns of C from columns of op(B).
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t tiles = (extent + kTile - 1) / kTile;
  compute_pool().parallel_for(threads, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t begin = std::min(extent, tiles * t / threads * kTile);
      const int64_t end = std::min(extent, tiles * (t + 1) / threads * kTile);
      if (begin == end) continue;
      if (by_rows) {
        const float* a = trans_a ? A + begin : A + begin * lda;
        sgemm(trans_a, trans_b, end - begin, N, K, alpha, a, lda, B, ldb, beta, C + begin * ldc,
              ldc);
      } else {
        const float* b = trans_b ? B + begin * ldb : B + begin;
        sgemm(trans_a, trans_b, M, end - begin, K, alpha, A, lda, b, ldb, beta, C + begin, ldc);
      }
    }
  });
}

void add_column_sums(float* out, const float* inp, int64_t rows, int64_t cols) {
  column_reduce<1>(
      rows, cols, [&](int64_t r, int64_t c, float* v) { v[0] = inp[r * cols + c]; },
      [&](int64_t c, const float* total) { out[c] += total[0]; });
}

}  // namespace ftune::cpu
