// Dropout: rate, scaling, identical masks in forward and backward, independence from thread
// count and in-place use, and the same mask on every device as on the CPU.
#include "ops/dropout.h"

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

FTUNE_INSTANTIATE_DEVICES(DropoutTest);

}  // namespace
}  // namespace ftune::test
