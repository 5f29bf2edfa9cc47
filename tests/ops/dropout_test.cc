// Dropout: rate, scaling, identical masks in forward and backward, independence from thread
// count and in-place use, the same mask on every device as on the CPU, and the (row0, Tv) stream
// layout: a batch cut into micro-batches padded to different lengths gets, on its real tokens,
// exactly the masks of the whole batch.
#include "ops/dropout.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/thread_pool.h"
#include "op_test_util.h"

namespace ftune::test {
namespace {

class DropoutTest : public OpTest {};

TEST_P(DropoutTest, DropsAtTheRequestedRateAndScalesTheRest) {
  const int64_t n = 100003;  // not a multiple of four
  const float p = 0.3f;
  auto x = random_values(n, rng, 0.5f, 1.5f);
  auto dx = device_f32(x, {n}, device());
  auto out = poisoned({n}, device());
  const RngKey key{1234, 7, 3};
  dropout_forward(out.view(), dx.view(), p, key);
  const auto y = to_vector(out.view());
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = philox_uniform_at(key, i) >= p;
    EXPECT_EQ(y[i], keep ? x[i] * (1.0f / (1.0f - p)) : 0.0f) << i;
    dropped += !keep;
  }
  EXPECT_NEAR(double(dropped) / n, p, 0.01);

  // Backward applies the same mask and scale.
  const auto ones = std::vector<float>(n, 1.0f);
  auto dout = device_f32(ones, {n}, device());
  auto gx = poisoned({n}, device());
  dropout_backward(gx.view(), dout.view(), p, key);
  const auto g = to_vector(gx.view());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(g[i] != 0.0f, y[i] != 0.0f) << i;
}

TEST_P(DropoutTest, MaskIndependentOfThreadsAndInPlace) {
  const int64_t n = 4097;
  auto x = random_values(n, rng);
  const RngKey key{99, 1, 0};
  std::vector<float> first;
  for (int threads : {1, 2, 5}) {
    set_compute_threads(threads);
    auto buf = device_f32(x, {n}, device());
    dropout_forward(buf.view(), buf.view(), 0.5f, key);  // in place
    const auto y = to_vector(buf.view());
    if (first.empty()) first = y;
    EXPECT_EQ(y, first) << threads << " threads";
  }
  set_compute_threads(0);
}

TEST_P(DropoutTest, MatchesTheCpuMaskExactly) {
  const int64_t n = 1001;
  auto x = random_values(n, rng);
  const RngKey key{5, 2, 11};
  auto on_device = device_f32(x, {n}, device());
  auto out = poisoned({n}, device());
  dropout_forward(out.view(), on_device.view(), 0.1f, key);
  auto on_cpu = device_f32(x, {n}, Device::cpu());
  auto ref = poisoned({n}, Device::cpu());
  dropout_forward(ref.view(), on_cpu.view(), 0.1f, key);
  EXPECT_EQ(to_vector(out.view()), to_vector(ref.view()));
}

TEST_P(DropoutTest, ZeroRateIsIdentityAndBadRateIsRejected) {
  auto x = random_values(10, rng);
  auto dx = device_f32(x, {10}, device());
  auto out = poisoned({10}, device());
  dropout_forward(out.view(), dx.view(), 0.0f, RngKey{});
  EXPECT_EQ(to_vector(out.view()), x);
  EXPECT_THROW(dropout_forward(out.view(), dx.view(), 1.0f, RngKey{}), ShapeError);
}

// A dropped element is x * 0, as in PyTorch's x * mask * scale: a dropped NaN or inf gives NaN
// (a non-finite gradient is never hidden from the step's finite check) and a dropped negative
// value -0; kept ones are x * scale. The same on every device, for f32 and for a 16-bit output.
TEST_P(DropoutTest, DroppedElementsAreMultipliedByZeroSoNonFiniteValuesStayNonFinite) {
  const int64_t n = 256;
  const float p = 0.5f, scale = 1.0f / (1.0f - p);
  const RngKey key{77, 3, 1};
  const float kinds[] = {std::nanf(""), INFINITY, -INFINITY, -1.5f};
  std::vector<float> x(n), expected(n);
  int dropped_of_kind[4] = {};
  for (int64_t i = 0; i < n; ++i) {
    x[i] = kinds[i % 4];
    const bool keep = philox_uniform_at(key, i) >= p;
    expected[i] = x[i] * (keep ? scale : 0.0f);
    dropped_of_kind[i % 4] += !keep;
  }
  for (int k = 0; k < 4; ++k) ASSERT_GT(dropped_of_kind[k], 0) << "kind " << k;
  auto same = [](float got, float want) {
    return std::isnan(want) ? std::isnan(got)
                            : std::memcmp(&got, &want, sizeof(float)) == 0;  // -0 is not +0
  };
  auto dx = device_f32(x, {n}, device());
  auto out = device_f32(std::vector<float>(n, 123.0f), {n}, device());  // not NaN: see above
  dropout_forward(out.view(), dx.view(), p, key);
  const auto y = to_vector(out.view());
  for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(same(y[i], expected[i])) << i << ": " << y[i];

  // f32 in, bf16 out: the mixed-precision kernel.
  DeviceTensor out16(device(), DType::BF16, Shape{n});
  dropout_forward(out16.view(), dx.view(), p, key);
  HostTensor h(DType::BF16, Shape{n});
  copy(h.view(), out16.view());
  for (int64_t i = 0; i < n; ++i)
    EXPECT_TRUE(same(bf16_to_float(h.data<bf16_t>()[i]), bf16_to_float(float_to_bf16(expected[i]))))
        << i << " (bf16)";
}

// A (B, T, C) batch whose rows have real lengths `len`, padded to T; the rows [r0, r0 + n) cut
// out and padded only to their own longest, as the trainer cuts micro-batches.
struct Padded {
  int64_t rows, T;
  std::vector<float> values;  // (rows, T, C), padding 0
};

Padded cut(const std::vector<float>& whole, const std::vector<int64_t>& len, int64_t T, int64_t C,
           int64_t r0, int64_t n) {
  Padded p{n, 0, {}};
  for (int64_t b = r0; b < r0 + n; ++b) p.T = std::max(p.T, len[b]);
  p.values.assign(n * p.T * C, 0.0f);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t t = 0; t < len[r0 + b]; ++t)
      for (int64_t c = 0; c < C; ++c)
        p.values[(b * p.T + t) * C + c] = whole[((r0 + b) * T + t) * C + c];
  return p;
}

TEST_P(DropoutTest, MicroBatchesOfAStepGetTheWholeBatchMasks) {
  // C odd and Tv > T: sequences start off Philox group boundaries and leave gaps in the stream.
  const int64_t B = 5, T = 7, C = 5, Tv = 11;
  const std::vector<int64_t> len = {2, 3, 3, 6, 7};  // rows ordered by length, as in a step batch
  const float p = 0.4f;
  const RngKey key{2024, 5, 17};
  const auto x = random_values(B * T * C, rng, 0.5f, 1.5f);
  auto run = [&](const std::vector<float>& v, int64_t rows, int64_t seq, uint64_t row0) {
    auto in = device_f32(v, {rows * seq, C}, device());
    auto out = poisoned({rows * seq, C}, device());
    dropout_forward(out.view(), in.view(), p, key, DropoutRows{row0, seq, Tv});
    auto back = poisoned({rows * seq, C}, device());
    dropout_backward(back.view(), in.view(), p, key, DropoutRows{row0, seq, Tv});
    EXPECT_EQ(to_vector(back.view()), to_vector(out.view()));  // the same mask both ways
    return to_vector(out.view());
  };
  const auto whole = run(x, B, T, 0);
  // Every element against the formula: ((row0 + b) * Tv + t) * C + c.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = (b * T + t) * C + c;
        const bool keep = philox_uniform_at(key, uint64_t((b * Tv + t) * C + c)) >= p;
        ASSERT_EQ(whole[i], keep ? x[i] * (1.0f / (1.0f - p)) : 0.0f) << b << " " << t << " " << c;
      }
  // Cut as 3 + 2 rows (padded to 3 and 7) and as 1 + 4 (padded to 2 and 7): the same values on
  // every real token.
  for (int64_t first : {3, 1}) {
    int64_t dropped = 0;
    for (const auto [r0, n] : {std::pair<int64_t, int64_t>{0, first}, {first, B - first}}) {
      const Padded m = cut(x, len, T, C, r0, n);
      if (r0 == 0) EXPECT_LT(m.T, T);  // padded shorter than the whole batch
      const auto got = run(m.values, n, m.T, uint64_t(r0));
      for (int64_t b = 0; b < n; ++b)
        for (int64_t t = 0; t < len[r0 + b]; ++t)
          for (int64_t c = 0; c < C; ++c) {
            const float want = whole[((r0 + b) * T + t) * C + c];
            EXPECT_EQ(got[(b * m.T + t) * C + c], want) << "rows from " << r0 << " b " << b;
            dropped += want == 0.0f;
          }
    }
    EXPECT_GT(dropped, 0);
  }
  // A micro-batch placed at the wrong row gets other masks (the test can tell them apart).
  const Padded tail = cut(x, len, T, C, 3, 2);
  EXPECT_NE(run(tail.values, 2, tail.T, 0), run(tail.values, 2, tail.T, 3));
}

TEST_P(DropoutTest, LaidOutMaskFollowsTheFormulaAcrossBlocksAndThreads) {
  // 4329 elements: several 1024-element CPU blocks, each spanning sequences that start off
  // Philox group boundaries.
  const int64_t B = 9, T = 37, C = 13, Tv = 40;
  const uint64_t row0 = 6;
  const float p = 0.25f;
  const RngKey key{77, 3, 9};
  const auto x = random_values(B * T * C, rng, 0.5f, 1.5f);
  for (int threads : {1, 3}) {
    set_compute_threads(threads);
    auto in = device_f32(x, {B * T, C}, device());
    auto out = poisoned({B * T, C}, device());
    dropout_forward(out.view(), in.view(), p, key, DropoutRows{row0, T, Tv});
    const auto y = to_vector(out.view());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = (b * T + t) * C + c;
          const bool keep = philox_uniform_at(key, ((row0 + b) * Tv + t) * C + c) >= p;
          ASSERT_EQ(y[i], keep ? x[i] * (1.0f / (1.0f - p)) : 0.0f) << threads << " threads, " << i;
        }
  }
  set_compute_threads(0);
}

TEST_P(DropoutTest, DefaultLayoutIsTheFlatIndexAndBadLayoutsAreRejected) {
  const int64_t B = 3, T = 4, C = 6;
  const auto x = random_values(B * T * C, rng);
  auto in = device_f32(x, {B * T, C}, device());
  auto flat = poisoned({B * T, C}, device()), laid = poisoned({B * T, C}, device());
  const RngKey key{8, 1, 2};
  dropout_forward(flat.view(), in.view(), 0.3f, key);
  dropout_forward(laid.view(), in.view(), 0.3f, key, DropoutRows{0, T, T});
  EXPECT_EQ(to_vector(flat.view()), to_vector(laid.view()));
  EXPECT_THROW(dropout_forward(laid.view(), in.view(), 0.3f, key, DropoutRows{0, 5, 8}),
               ShapeError);  // 12 tokens are not whole sequences of 5
  EXPECT_THROW(dropout_forward(laid.view(), in.view(), 0.3f, key, DropoutRows{0, T, T - 1}),
               ShapeError);  // Tv < T
}

FTUNE_INSTANTIATE_DEVICES(DropoutTest);

}  // namespace
}  // namespace ftune::test
