// The CPU GEMM through each compiled library (ops/cpu_gemm_library.h): cpu::gemm() against a
// double-precision reference on the shapes the models run (one short row, a batch of short rows,
// training's forward, input and weight gradients; every transpose; strided operands; alpha, beta
// = 0 on a NaN-poisoned C and beta = 1 on a random C; split over the threads and inside a parallel
// region), the switch itself, and FTUNE_CPU_GEMM's spellings.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"
#include "ops/primitives_cpu.h"
#include "test_util.h"

namespace ftune::test {
namespace {

struct GemmCase {
  int64_t M, N, K;
  bool ta, tb;
  float alpha, beta;
  int64_t pad;  // extra elements on every leading dimension
};

// Checks cpu::gemm(c) through `lib` against the reference; `what` names the case.
void expect_library_gemm(cpu::GemmLibrary lib, const GemmCase& c, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  std::vector<float> a(a_rows * lda), b(b_rows * ldb), out(c.M * ldc);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  for (float& x : out) x = c.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  const std::vector<float> before = out;
  cpu::set_gemm_library(lib);
  cpu::gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(),
            ldc);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double x = c.ta ? a[k * lda + i] : a[i * lda + k];
        const double y = c.tb ? b[j * ldb + k] : b[k * ldb + j];
        sum += x * y;
        mag += std::fabs(x * y);
      }
      double want = c.alpha * sum;
      if (c.beta != 0.0f) want += c.beta * static_cast<double>(before[i * ldc + j]);
      const double tol = 1e-6 * (std::fabs(c.alpha) * mag + 1.0) * std::sqrt(double(c.K) + 1.0);
      ASSERT_NEAR(out[i * ldc + j], want, tol)
          << cpu::gemm_library_name(lib) << " M=" << c.M << " N=" << c.N << " K=" << c.K
          << " ta=" << c.ta << " tb=" << c.tb << " at (" << i << ", " << j << ")";
    }
  // The padding between rows of C is never written.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < ldc; ++j)
      if (c.beta != 0.0f) ASSERT_EQ(out[i * ldc + j], before[i * ldc + j]);
}

std::vector<cpu::GemmLibrary> compiled_libraries() {
  std::vector<cpu::GemmLibrary> libs = {cpu::GemmLibrary::OpenBlas};
  if (cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OneDnn);
  return libs;
}

class CpuGemmLibrary : public ::testing::Test {
 protected:
  void TearDown() override {
    cpu::set_gemm_library(cpu::parse_gemm_library("auto", "test"));
    set_compute_threads(0);
  }
  std::mt19937_64 rng_{test_seed()};
};

TEST_F(CpuGemmLibrary, EveryLibraryMatchesTheReferenceOnModelShapes) {
  const GemmCase cases[] = {
      {23, 96, 64, false, true, 1.0f, 0.0f, 0},    // one short row, x @ W^T
      {1, 40, 33, false, true, 1.0f, 0.0f, 3},     // a single token, strided
      {184, 160, 48, false, true, 1.0f, 1.0f, 0},  // a batch, bias already in C (beta = 1)
      {256, 48, 160, false, false, 1.0f, 0.0f, 5},  // input gradient dY @ W
      {96, 48, 300, true, false, 1.0f, 1.0f, 0},    // weight gradient dW += dY^T @ X
      {37, 29, 31, true, true, 0.125f, 0.5f, 2},    // both transposed, odd sizes, alpha, beta
      {8, 8, 0, false, true, 1.0f, 0.0f, 0},        // K = 0: C = beta * C, here zeros
  };
  for (const int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    for (const cpu::GemmLibrary lib : compiled_libraries())
      for (const GemmCase& c : cases) {
        SCOPED_TRACE(threads);
        expect_library_gemm(lib, c, rng_);
        if (HasFatalFailure()) return;
      }
  }
}

TEST_F(CpuGemmLibrary, InsideAParallelRegionEachThreadRunsItsOwnProduct) {
  set_compute_threads(2);
  for (const cpu::GemmLibrary lib : compiled_libraries()) {
    cpu::set_gemm_library(lib);
    const int64_t n = 64;
    std::vector<float> a(4 * n * n, 0.5f), b(n * n, 2.0f), c(4 * n * n, -1.0f);
    parallel_for(4, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        cpu::gemm(false, false, n, n, n, 1.0f, a.data() + t * n * n, n, b.data(), n, 0.0f,
                  c.data() + t * n * n, n);
    });
    for (float x : c) ASSERT_EQ(x, 64.0f) << cpu::gemm_library_name(lib);
  }
}

TEST_F(CpuGemmLibrary, OneDnnAccumulatesAWeightGradientAsTheProductMadeApart) {
  // C += A^T @ B (a weight gradient accumulated over micro-batches) through oneDNN gives
  // C + (A^T @ B rounded on its own): the bits of two gradients made apart and then summed (over
  // ranks). oneDNN alone would fold C into its running sums (K = 1000: several of its K blocks);
  // OpenBLAS does the same beyond one of its own K blocks and is not asserted.
  if (!cpu::onednn_available()) GTEST_SKIP() << cpu::onednn_unavailable_reason();
  set_compute_threads(1);
  cpu::set_gemm_library(cpu::GemmLibrary::OneDnn);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t M = 300, N = 24, K = 1000;  // more rows than one of the panels
  std::vector<float> a(K * M), b(K * N), c(M * N), apart(M * N, 0.0f);
  for (float& v : a) v = u(rng_);
  for (float& v : b) v = u(rng_);
  for (float& v : c) v = u(rng_);
  std::vector<float> acc = c;
  cpu::gemm(true, false, M, N, K, 1.0f, a.data(), M, b.data(), N, 1.0f, acc.data(), N);
  cpu::gemm(true, false, M, N, K, 1.0f, a.data(), M, b.data(), N, 0.0f, apart.data(), N);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(acc[i], c[i] + apart[i]) << "at " << i;
}

TEST_F(CpuGemmLibrary, TheSwitchAndItsSpellings) {
  EXPECT_EQ(cpu::parse_gemm_library("openblas", "X"), cpu::GemmLibrary::OpenBlas);
  const cpu::GemmLibrary best =
      cpu::onednn_available() ? cpu::GemmLibrary::OneDnn : cpu::GemmLibrary::OpenBlas;
  EXPECT_EQ(cpu::parse_gemm_library("auto", "X"), best);
  EXPECT_EQ(cpu::parse_gemm_library("", "X"), best);
  try {
    cpu::parse_gemm_library("mkl", "FTUNE_CPU_GEMM");
    ADD_FAILURE() << "mkl was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("FTUNE_CPU_GEMM is 'mkl': expected openblas, onednn"),
              std::string::npos)
        << e.what();
  }
  if (cpu::onednn_available()) {
    EXPECT_EQ(cpu::parse_gemm_library("onednn", "X"), cpu::GemmLibrary::OneDnn);
  } else {
    EXPECT_THROW(cpu::parse_gemm_library("onednn", "X"), InputError);
    EXPECT_THROW(cpu::set_gemm_library(cpu::GemmLibrary::OneDnn), InputError);
  }
  for (const cpu::GemmLibrary lib : compiled_libraries()) {
    cpu::set_gemm_library(lib);
    EXPECT_EQ(cpu::gemm_library(), lib);
    EXPECT_EQ(cpu::gemm_library_description().rfind(cpu::gemm_library_name(lib), 0), 0u)
        << cpu::gemm_library_description();
  }
}

}  // namespace
}  // namespace ftune::test
