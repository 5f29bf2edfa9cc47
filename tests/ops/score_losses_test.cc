// The single-score and multi-label losses (ops/bce_with_logits.h, ops/mse_loss.h): known values
// of torch.nn.functional.binary_cross_entropy_with_logits and mse_loss (reduction "mean"), with and
// without uncounted (-100) rows, gradients against finite differences, the dloss_at factor, and
// every device against the CPU at a size where the reduction takes several rounds.
#include <cmath>

#include "op_test_util.h"
#include "ops/bce_with_logits.h"
#include "ops/mse_loss.h"

namespace ftune::test {
namespace {

class ScoreLossTest : public OpTest {};

TEST_P(ScoreLossTest, BceKnownValuesFromPyTorch) {
  // torch.nn.functional.binary_cross_entropy_with_logits(
  //   torch.tensor([[1.5], [-2.0], [0.25], [4.0]]), torch.tensor([[1.], [0.], [.3], [.9]]))
  //   -> 0.3743577301502228; rows 0, 2, 3 only -> 0.45683422684669495 (float32)
  auto logits = device_f32({1.5f, -2.0f, 0.25f, 4.0f}, {4, 1}, device());
  auto targets = device_f32({1.0f, 0.0f, 0.3f, 0.9f}, {4, 1}, device());
  auto loss = poisoned({1}, device()), probs = poisoned({4, 1}, device());
  bce_with_logits_forward(loss.view(), probs.view(), logits.view(), targets.view());
  EXPECT_NEAR(to_vector(loss.view())[0], 0.3743576592055945, 1e-6);
  EXPECT_NEAR(to_vector(probs.view())[0], 1.0 / (1.0 + std::exp(-1.5)), 1e-7);
  auto labels = device_i32({0, -100, 0, 0}, {4}, device());
  bce_with_logits_forward(loss.view(), probs.view(), logits.view(), targets.view(), labels.view());
  EXPECT_NEAR(to_vector(loss.view())[0], 0.45683420859313517, 1e-6);
}

TEST_P(ScoreLossTest, MseKnownValuesFromPyTorch) {
  // torch.nn.functional.mse_loss(torch.tensor([.5, -1.25, 2., 3.]), torch.tensor([1., 0., 2.5,
  //   -1.])) -> 4.515625; rows 0, 2, 3 only -> 5.5
  auto logits = device_f32({0.5f, -1.25f, 2.0f, 3.0f}, {4, 1}, device());
  auto targets = device_f32({1.0f, 0.0f, 2.5f, -1.0f}, {4, 1}, device());
  auto loss = poisoned({1}, device()), residual = poisoned({4, 1}, device());
  mse_loss_forward(loss.view(), residual.view(), logits.view(), targets.view());
  EXPECT_NEAR(to_vector(loss.view())[0], 4.515625, 1e-6);
  auto labels = device_i32({0, -100, 0, 0}, {4}, device());
  mse_loss_forward(loss.view(), residual.view(), logits.view(), targets.view(), labels.view());
  EXPECT_NEAR(to_vector(loss.view())[0], 5.5, 1e-6);
}

// One finite-difference check for either loss over (B, K) scores with an uncounted row.
void check_score_gradient(Device dev, std::mt19937_64& rng, bool bce, int64_t B, int64_t K) {
  auto z = random_values(B * K, rng, -3, 3);
  auto t = random_values(B * K, rng, bce ? 0.0f : -2.0f, bce ? 1.0f : 2.0f);
  std::vector<int32_t> y(B, 0);
  y[1] = -100;
  auto labels = device_i32(y, {B}, dev);
  auto targets = device_f32(t, {B, K}, dev);
  auto run_forward = [&](const std::vector<float>& values, DeviceTensor& aux) {
    auto dz = device_f32(values, {B, K}, dev);
    auto loss = poisoned({1}, dev);
    if (bce)
      bce_with_logits_forward(loss.view(), aux.view(), dz.view(), targets.view(), labels.view());
    else
      mse_loss_forward(loss.view(), aux.view(), dz.view(), targets.view(), labels.view());
    return double(to_vector(loss.view())[0]);
  };
  auto loss_fn = [&]() {
    auto aux = poisoned({B, K}, dev);
    return run_forward(z, aux);
  };
  auto aux = poisoned({B, K}, dev);
  run_forward(z, aux);
  // dloss 0.5 given as 0.25 x a device factor of 2: the finite differences of 0.5 x loss.
  auto factor = device_f32({2.0f}, {1}, dev);
  auto g = poisoned({B, K}, dev);
  if (bce)
    bce_with_logits_backward(g.view(), aux.view(), targets.view(), labels.view(), 0.25f,
                             factor.view().data_as<float>());
  else
    mse_loss_backward(g.view(), aux.view(), labels.view(), 0.25f, factor.view().data_as<float>());
  auto grad = to_vector(g.view());
  for (int64_t c = 0; c < K; ++c) EXPECT_EQ(grad[1 * K + c], 0.0f);  // the uncounted row
  for (float& v : grad) v *= 2.0f;                                   // back to dloss = 1
  expect_gradient(loss_fn, z.data(), B * K, grad, 2e-3, bce ? "bce dlogits" : "mse dlogits", 1e-2f,
                  100);
}

TEST_P(ScoreLossTest, BceGradientMatchesFiniteDifferences) {
  check_score_gradient(device(), rng, true, 6, 1);
  check_score_gradient(device(), rng, true, 5, 3);  // multi-label
}

TEST_P(ScoreLossTest, MseGradientMatchesFiniteDifferences) {
  check_score_gradient(device(), rng, false, 6, 1);
  check_score_gradient(device(), rng, false, 4, 2);
}

TEST_P(ScoreLossTest, ManyRowsMatchTheCpu) {
  // More elements than the forward block has threads (several rounds of its loop).
  const int64_t B = 300, K = 3;
  auto z = random_values(B * K, rng, -6, 6);
  auto t = random_values(B * K, rng, 0, 1);
  std::vector<int32_t> y(B, 0);
  for (int64_t i = 0; i < B; i += 7) y[i] = -100;
  for (const bool bce : {true, false}) {
    auto run = [&](Device dev, std::vector<float>& aux_out, std::vector<float>& grad_out) {
      auto dz = device_f32(z, {B, K}, dev), dt = device_f32(t, {B, K}, dev);
      auto labels = device_i32(y, {B}, dev);
      auto loss = poisoned({1}, dev), aux = poisoned({B, K}, dev), g = poisoned({B, K}, dev);
      if (bce) {
        bce_with_logits_forward(loss.view(), aux.view(), dz.view(), dt.view(), labels.view());
        bce_with_logits_backward(g.view(), aux.view(), dt.view(), labels.view(), 0.5f);
      } else {
        mse_loss_forward(loss.view(), aux.view(), dz.view(), dt.view(), labels.view());
        mse_loss_backward(g.view(), aux.view(), labels.view(), 0.5f);
      }
      aux_out = to_vector(aux.view());
      grad_out = to_vector(g.view());
      return to_vector(loss.view())[0];
    };
    std::vector<float> a_cpu, g_cpu, a_dev, g_dev;
    const float l_cpu = run(Device::cpu(), a_cpu, g_cpu), l_dev = run(device(), a_dev, g_dev);
    EXPECT_NEAR(l_dev, l_cpu, 1e-6 * std::fabs(l_cpu)) << (bce ? "bce" : "mse");
    for (int64_t i = 0; i < B * K; ++i) {
      EXPECT_NEAR(a_dev[i], a_cpu[i], 1e-6) << i;
      EXPECT_NEAR(g_dev[i], g_cpu[i], 1e-7) << i;
    }
  }
}

TEST(ScoreLossErrors, TargetsOfAnotherShapeAreRefused) {
  auto logits = zeros({2, 1}, Device::cpu()), probs = zeros({2, 1}, Device::cpu()),
       loss = zeros({1}, Device::cpu()), targets = zeros({2, 2}, Device::cpu());
  EXPECT_THROW(bce_with_logits_forward(loss.view(), probs.view(), logits.view(), targets.view()),
               ShapeError);
  EXPECT_THROW(mse_loss_forward(loss.view(), probs.view(), logits.view(), targets.view()),
               ShapeError);
}

FTUNE_INSTANTIATE_DEVICES(ScoreLossTest);

}  // namespace
}  // namespace ftune::test
