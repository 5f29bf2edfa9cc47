// Cross-entropy with class weights, label smoothing and ignored rows: loss vs PyTorch's formula
// (values checked against torch.nn.functional.cross_entropy), gradient vs finite differences.
#include "ops/cross_entropy.h"

#include <cmath>

#include "op_test_util.h"

namespace ftune::test {
namespace {

class CrossEntropyTest : public OpTest {};

TEST_P(CrossEntropyTest, KnownValuesFromPyTorch) {
  // torch.nn.functional.cross_entropy(torch.tensor([[1.,2.,.5],[-1.,0.,3.]]), torch.tensor([1,2]),
  //   weight=torch.tensor([1.,2.,.5]), label_smoothing=0.1)  -> 0.5276163816452026
  //   (unweighted, no smoothing -> 0.2651263475418091)
  auto logits = device_f32({1, 2, 0.5f, -1, 0, 3}, {2, 3}, device());
  auto labels = device_i32({1, 2}, {2}, device());
  auto weights = device_f32({1, 2, 0.5f}, {3}, device());
  auto loss = poisoned({1}, device()), probs = poisoned({2, 3}, device());
  CrossEntropyOptions o{0.1f, weights.view()};
  cross_entropy_forward(loss.view(), probs.view(), logits.view(), labels.view(), o);
  EXPECT_NEAR(to_vector(loss.view())[0], 0.5276163816452026, 1e-6);
  cross_entropy_forward(loss.view(), probs.view(), logits.view(), labels.view(),
                        CrossEntropyOptions{});
  EXPECT_NEAR(to_vector(loss.view())[0], 0.2651263475418091, 1e-6);
}

TEST_P(CrossEntropyTest, GradientMatchesFiniteDifferencesWithWeightsSmoothingAndIgnoredRows) {
  const int64_t B = 5, K = 4;
  auto z = random_values(B * K, rng, -3, 3);
  const std::vector<int32_t> y{2, -100, 0, 3, 2};
  auto w = random_values(K, rng, 0.2f, 2.0f);
  auto labels = device_i32(y, {B}, device());
  auto weights = device_f32(w, {K}, device());
  const CrossEntropyOptions o{0.15f, weights.view()};
  auto loss_fn = [&]() {
    auto dz = device_f32(z, {B, K}, device());
    auto loss = poisoned({1}, device()), probs = poisoned({B, K}, device());
    cross_entropy_forward(loss.view(), probs.view(), dz.view(), labels.view(), o);
    return double(to_vector(loss.view())[0]);
  };
  auto dz = device_f32(z, {B, K}, device());
  auto loss = poisoned({1}, device()), probs = poisoned({B, K}, device());
  cross_entropy_forward(loss.view(), probs.view(), dz.view(), labels.view(), o);
  auto g = poisoned({B, K}, device());
  cross_entropy_backward(g.view(), probs.view(), labels.view(), o, 1.0f);
  const auto grad = to_vector(g.view());
  for (int64_t k = 0; k < K; ++k) EXPECT_EQ(grad[1 * K + k], 0.0f);  // ignored row
  expect_gradient(loss_fn, z.data(), B * K, grad, 2e-3, "dlogits", 1e-2f, 100);
}

TEST_P(CrossEntropyTest, ManyRowsAndClassesMatchTheCpu) {
  // More rows than a block has warps and more classes than a warp has lanes.
  const int64_t B = 75, K = 41;
  auto z = random_values(B * K, rng, -4, 4);
  auto w = random_values(K, rng, 0.2f, 2.0f);
  std::vector<int32_t> y(B);
  std::uniform_int_distribution<int32_t> pick(0, K - 1);
  for (int64_t i = 0; i < B; ++i) y[i] = i % 7 == 3 ? -100 : pick(rng);
  auto run = [&](Device dev, std::vector<float>& probs_out, std::vector<float>& grad_out) {
    auto dz = device_f32(z, {B, K}, dev), dw = device_f32(w, {K}, dev);
    auto labels = device_i32(y, {B}, dev);
    const CrossEntropyOptions o{0.1f, dw.view()};
    auto loss = poisoned({1}, dev), probs = poisoned({B, K}, dev), g = poisoned({B, K}, dev);
    cross_entropy_forward(loss.view(), probs.view(), dz.view(), labels.view(), o);
    cross_entropy_backward(g.view(), probs.view(), labels.view(), o, 0.5f);
    probs_out = to_vector(probs.view());
    grad_out = to_vector(g.view());
    return to_vector(loss.view())[0];
  };
  std::vector<float> p_cpu, g_cpu, p_dev, g_dev;
  const float l_cpu = run(Device::cpu(), p_cpu, g_cpu), l_dev = run(device(), p_dev, g_dev);
  EXPECT_NEAR(l_dev, l_cpu, 1e-6 * std::fabs(l_cpu));
  for (int64_t i = 0; i < B * K; ++i) {
    EXPECT_NEAR(p_dev[i], p_cpu[i], 1e-6) << i;
    EXPECT_NEAR(g_dev[i], g_cpu[i], 1e-7) << i;
  }
}

TEST(CrossEntropyErrors, LabelOutsideClassesIsAnInputError) {
  auto logits = zeros({2, 3}, Device::cpu()), probs = zeros({2, 3}, Device::cpu()),
       loss = zeros({1}, Device::cpu());
  auto labels = device_i32({0, 3}, {2}, Device::cpu());
  EXPECT_THROW(cross_entropy_forward(loss.view(), probs.view(), logits.view(), labels.view(), {}),
               InputError);
}

FTUNE_INSTANTIATE_DEVICES(CrossEntropyTest);

}  // namespace
}  // namespace ftune::test
