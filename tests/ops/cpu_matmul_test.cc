// Frozen weights packed for oneDNN's matmul (ops/cpu_matmul.h): the packed linear layer against a
// double-precision reference and against the plain GEMM path (one short row, a block of rows, a
// product cut into many blocks over the threads; strided input and output, with and without bias;
// the padding between output rows untouched), each weight packed once, primitives made once per
// shape and then reused, cpu::linear_forward taking the path only inside a FrozenWeightsScope,
// the switch off, and bf16 scoring within its stated tolerance where the CPU has native bf16.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"
#include "ops/cpu_matmul.h"
#include "ops/linear.h"
#include "test_util.h"

namespace ftune::test {
namespace {

struct PackedCase {
  int64_t rows, in, out;
  bool bias;
  int64_t pad;  // extra elements on the input's and the output's row strides
};

struct PackedData {
  std::vector<float> x, w, b, y;
  int64_t ldi, ldo;
};

PackedData packed_data(const PackedCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  PackedData d;
  d.ldi = c.in + c.pad;
  d.ldo = c.out + c.pad;
  d.x.resize(c.rows * d.ldi);
  d.w.resize(c.out * c.in);
  d.b.resize(c.out);
  d.y.assign(c.rows * d.ldo, std::numeric_limits<float>::quiet_NaN());
  for (float& v : d.x) v = u(rng);
  for (float& v : d.w) v = u(rng);
  for (float& v : d.b) v = u(rng);
  return d;
}

// |y - x W^T - b| within `rel` of the products' magnitude, row by row; the padding stays NaN.
void expect_packed_linear(const PackedCase& c, const PackedData& d, double rel) {
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t o = 0; o < c.out; ++o) {
      double sum = c.bias ? d.b[o] : 0.0, mag = c.bias ? std::fabs(d.b[o]) : 0.0;
      for (int64_t k = 0; k < c.in; ++k) {
        const double p = double(d.x[i * d.ldi + k]) * d.w[o * c.in + k];
        sum += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(d.y[i * d.ldo + o], sum, rel * (mag + 1.0))
          << "rows=" << c.rows << " in=" << c.in << " out=" << c.out << " at (" << i << ", "
          << o << ")";
    }
    for (int64_t o = c.out; o < d.ldo; ++o) ASSERT_TRUE(std::isnan(d.y[i * d.ldo + o]));
  }
}

class CpuMatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::onednn_available()) GTEST_SKIP() << "oneDNN: " << cpu::onednn_unavailable_reason();
    cpu::set_gemm_library(cpu::GemmLibrary::OneDnn);
    cpu::set_packed_matmul_enabled(true);
    if (!cpu::packed_matmul_supports(cpu::MatmulPrecision::F32))
      GTEST_SKIP() << cpu::packed_matmul_unavailable_reason(cpu::MatmulPrecision::F32);
  }
  void TearDown() override { set_compute_threads(0); }
};

const std::vector<PackedCase> kPackedCases = {
    {1, 384, 1152, true, 0},     // one token
    {23, 384, 384, true, 5},     // one short pair, strided
    {600, 384, 1536, true, 0},   // several blocks over the threads
    {613, 1536, 384, false, 3},  // no bias, strided, a ragged last block
};

TEST_F(CpuMatmulTest, PackedLinearMatchesTheReferenceAndThePlainGemm) {
  for (int threads : {1, 2}) {
    set_compute_threads(threads);
    for (const PackedCase& c : kPackedCases) {
      PackedData d = packed_data(c, 17 + c.rows);
      cpu::PackedWeights packed;
      ASSERT_TRUE(packed.linear(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(),
                                c.bias ? d.b.data() : nullptr, c.rows, c.in, c.out));
      expect_packed_linear(c, d, 1e-6 * std::sqrt(double(c.in)));
      // The plain GEMM path (outside any scope) agrees within fp32 rounding.
      PackedData plain = d;
      std::fill(plain.y.begin(), plain.y.end(), std::numeric_limits<float>::quiet_NaN());
      cpu::linear_forward(plain.y.data(), plain.ldo, plain.x.data(), plain.ldi, plain.w.data(),
                          c.bias ? plain.b.data() : nullptr, c.rows, c.in, c.out);
      for (int64_t i = 0; i < c.rows; ++i)
        for (int64_t o = 0; o < c.out; ++o)
          ASSERT_NEAR(d.y[i * d.ldo + o], plain.y[i * d.ldo + o], 2e-5 * std::sqrt(double(c.in)));
    }
  }
}

TEST_F(CpuMatmulTest, EachWeightIsPackedOnceAndPrimitivesAreReused) {
  set_compute_threads(1);
  const PackedCase c{40, 384, 384, true, 0};
  PackedData d = packed_data(c, 3);
  cpu::PackedWeights packed;
  ASSERT_TRUE(packed.linear(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(), d.b.data(), c.rows,
                            c.in, c.out));
  EXPECT_EQ(packed.packed_count(), 1);
  EXPECT_GE(packed.packed_bytes(), int64_t(sizeof(float)) * c.in * c.out);
  const cpu::MatmulCacheStats before = cpu::matmul_cache_stats();
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(packed.linear(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(), d.b.data(),
                              c.rows, c.in, c.out));
  const cpu::MatmulCacheStats after = cpu::matmul_cache_stats();
  EXPECT_EQ(after.created, before.created) << "a primitive was made again for the same shape";
  EXPECT_EQ(after.reused, before.reused + 3);
  EXPECT_EQ(packed.packed_count(), 1) << "the weight was packed again";
  expect_packed_linear(c, d, 1e-6 * std::sqrt(double(c.in)));
  // A second weight of the same shape reuses the primitive and gets its own packed copy.
  PackedData e = packed_data(c, 4);
  ASSERT_TRUE(packed.linear(e.y.data(), e.ldo, e.x.data(), e.ldi, e.w.data(), e.b.data(), c.rows,
                            c.in, c.out));
  EXPECT_EQ(cpu::matmul_cache_stats().created, before.created);
  EXPECT_EQ(packed.packed_count(), 2);
  expect_packed_linear(c, e, 1e-6 * std::sqrt(double(c.in)));
}

TEST_F(CpuMatmulTest, LinearForwardUsesThePackedWeightsOnlyInsideAScope) {
  const PackedCase c{30, 64, 48, true, 0};
  PackedData d = packed_data(c, 5);
  cpu::PackedWeights packed;
  cpu::linear_forward(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(), d.b.data(), c.rows, c.in,
                      c.out);
  EXPECT_EQ(packed.packed_count(), 0);
  {
    const cpu::FrozenWeightsScope scope(&packed);
    EXPECT_EQ(cpu::frozen_weights(), &packed);
    {
      const cpu::FrozenWeightsScope inner(nullptr);  // an inner scope without weights: plain
      EXPECT_EQ(cpu::frozen_weights(), nullptr);
    }
    EXPECT_EQ(cpu::frozen_weights(), &packed);
    cpu::linear_forward(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(), d.b.data(), c.rows,
                        c.in, c.out);
  }
  EXPECT_EQ(cpu::frozen_weights(), nullptr);
  EXPECT_EQ(packed.packed_count(), 1);
  expect_packed_linear(c, d, 1e-6 * std::sqrt(double(c.in)));
}

TEST_F(CpuMatmulTest, TurnedOffOrOpenBlasTheCallerRunsThePlainGemm) {
  const PackedCase c{8, 32, 16, true, 0};
  PackedData d = packed_data(c, 6);
  cpu::PackedWeights packed;
  cpu::set_packed_matmul_enabled(false);
  EXPECT_FALSE(packed.linear(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(), d.b.data(),
                             c.rows, c.in, c.out));
  EXPECT_NE(cpu::packed_matmul_unavailable_reason(cpu::MatmulPrecision::F32).find("turned off"),
            std::string::npos);
  cpu::set_packed_matmul_enabled(true);
  cpu::set_gemm_library(cpu::GemmLibrary::OpenBlas);
  EXPECT_FALSE(packed.linear(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(), d.b.data(),
                             c.rows, c.in, c.out));
  EXPECT_TRUE(std::isnan(d.y[0]));  // nothing written
  cpu::set_gemm_library(cpu::GemmLibrary::OneDnn);
  EXPECT_EQ(packed.packed_count(), 0);
}

TEST_F(CpuMatmulTest, PrecisionSpellings) {
  EXPECT_EQ(cpu::parse_matmul_precision("fp32", "x"), cpu::MatmulPrecision::F32);
  EXPECT_EQ(cpu::parse_matmul_precision("f32", "x"), cpu::MatmulPrecision::F32);
  EXPECT_THROW(cpu::parse_matmul_precision("fp16", "FTUNE_SCORING_PRECISION"), InputError);
  if (!cpu::packed_matmul_supports(cpu::MatmulPrecision::BF16))
    EXPECT_THROW(cpu::parse_matmul_precision("bf16", "FTUNE_SCORING_PRECISION"), InputError);
}

// bf16 scoring: inputs and weights rounded to bf16 (8 bits of mantissa: relative error 2^-9 each),
// products accumulated in fp32. The stated tolerance: 1e-2 of the sum of |products| per output.
TEST_F(CpuMatmulTest, Bf16WithinItsToleranceWhereTheCpuHasIt) {
  if (!cpu::packed_matmul_supports(cpu::MatmulPrecision::BF16))
    GTEST_SKIP() << cpu::packed_matmul_unavailable_reason(cpu::MatmulPrecision::BF16);
  for (int threads : {1, 2}) {
    set_compute_threads(threads);
    for (const PackedCase& c : kPackedCases) {
      PackedData d = packed_data(c, 29 + c.rows);
      cpu::PackedWeights packed(cpu::MatmulPrecision::BF16);
      ASSERT_TRUE(packed.linear(d.y.data(), d.ldo, d.x.data(), d.ldi, d.w.data(),
                                c.bias ? d.b.data() : nullptr, c.rows, c.in, c.out));
      expect_packed_linear(c, d, 1e-2);
      // And it is bf16, not fp32 under another name: some output is off by more than fp32's
      // rounding.
      double worst = 0.0;
      for (int64_t o = 0; o < c.out; ++o) {
        double sum = c.bias ? d.b[o] : 0.0;
        for (int64_t k = 0; k < c.in; ++k) sum += double(d.x[k]) * d.w[o * c.in + k];
        worst = std::max(worst, std::fabs(sum - d.y[o]));
      }
      EXPECT_GT(worst, 1e-4);
    }
  }
}

}  // namespace
}  // namespace ftune::test
