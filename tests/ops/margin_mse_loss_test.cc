// MarginMSE over query groups: loss and gradient against the formula of sentence-transformers'
// cross-encoder MarginMSELoss written out in double (its PyTorch values on a trained head:
// tests/models/score_parity_test.cc, *_score_margin_mse), gradient vs finite differences, groups
// left out by the -100 mask, the dloss_at factor, CUDA vs CPU at many groups, and bad shapes.
#include "ops/margin_mse_loss.h"

#include <cmath>

#include "op_test_util.h"

namespace ftune::test {
namespace {

class MarginMseLossTest : public OpTest {};

// mean over counted (group, negative) of ((s_p - s_n) - (t_p - t_n))^2, the first row the positive.
double margin_mse_reference(const std::vector<float>& s, const std::vector<float>& t,
                            const std::vector<int32_t>& labels, int64_t gs) {
  double sum = 0.0;
  int64_t n = 0;
  for (size_t p = 0; p < s.size(); p += gs) {
    if (labels[p] < 0) continue;
    for (size_t i = p + 1; i < p + gs; ++i) {
      const double r = (double(s[p]) - s[i]) - (double(t[p]) - t[i]);
      sum += r * r;
      ++n;
    }
  }
  return sum / double(n);
}

TEST_P(MarginMseLossTest, MatchesTheFormulaAndFiniteDifferences) {
  const int64_t G = 5, gs = 4, N = G * gs;
  auto z = random_values(N, rng, -3, 3);
  const auto t = random_values(N, rng, -5, 5);
  std::vector<int32_t> y(N, 0);
  y[2 * gs] = -100;  // group 2 is left out
  auto teacher = device_f32(t, {N}, device());
  auto labels = device_i32(y, {N}, device());
  auto loss_fn = [&]() {
    auto logits = device_f32(z, {N, 1}, device());
    auto loss = poisoned({1}, device()), residual = poisoned({N}, device());
    margin_mse_loss_forward(loss.view(), residual.view(), logits.view(), teacher.view(),
                            labels.view(), gs);
    return double(to_vector(loss.view())[0]);
  };
  EXPECT_NEAR(loss_fn(), margin_mse_reference(z, t, y, gs), 1e-5 * loss_fn());
  auto logits = device_f32(z, {N, 1}, device());
  auto loss = poisoned({1}, device()), residual = poisoned({N}, device());
  margin_mse_loss_forward(loss.view(), residual.view(), logits.view(), teacher.view(),
                          labels.view(), gs);
  auto g = poisoned({N, 1}, device());
  margin_mse_loss_backward(g.view(), residual.view(), labels.view(), gs, 1.0f);
  const auto grad = to_vector(g.view());
  for (int64_t i = 2 * gs; i < 3 * gs; ++i) EXPECT_EQ(grad[i], 0.0f) << i;  // the masked group
  double total = 0.0;  // shift-invariant: the gradients of a group sum to 0
  for (float v : grad) total += v;
  EXPECT_NEAR(total, 0.0, 1e-5);
  expect_gradient(loss_fn, z.data(), N, grad, 2e-3, "dlogits", 1e-2f, 100);
  auto factor = device_f32({0.25f}, {1}, device());
  auto g2 = poisoned({N, 1}, device());
  margin_mse_loss_backward(g2.view(), residual.view(), labels.view(), gs, 2.0f,
                           factor.view().data_as<float>());
  const auto grad2 = to_vector(g2.view());
  for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(grad2[i], 0.5f * grad[i], 1e-7f) << i;
}

TEST_P(MarginMseLossTest, ManyGroupsMatchTheCpu) {
  // More rows than the forward block has threads, groups straddling thread strides.
  const int64_t gs = 7, G = 301, N = G * gs;
  const auto z = random_values(N, rng, -4, 4), t = random_values(N, rng, -8, 8);
  std::vector<int32_t> y(N, 0);
  for (int64_t g = 0; g < G; g += 13) y[g * gs] = -100;
  auto run = [&](Device dev, std::vector<float>& grad_out) {
    auto logits = device_f32(z, {N, 1}, dev), teacher = device_f32(t, {N}, dev);
    auto labels = device_i32(y, {N}, dev);
    auto loss = poisoned({1}, dev), residual = poisoned({N}, dev), g = poisoned({N, 1}, dev);
    margin_mse_loss_forward(loss.view(), residual.view(), logits.view(), teacher.view(),
                            labels.view(), gs);
    margin_mse_loss_backward(g.view(), residual.view(), labels.view(), gs, 0.5f);
    grad_out = to_vector(g.view());
    return to_vector(loss.view())[0];
  };
  std::vector<float> g_cpu, g_dev;
  const float l_cpu = run(Device::cpu(), g_cpu), l_dev = run(device(), g_dev);
  EXPECT_NEAR(l_cpu, margin_mse_reference(z, t, y, gs), 1e-5 * l_cpu);
  EXPECT_NEAR(l_dev, l_cpu, 1e-6 * std::fabs(l_cpu));
  for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(g_dev[i], g_cpu[i], 1e-9) << i;
}

TEST_P(MarginMseLossTest, EveryGroupMaskedIsNaNWithZeroGradient) {
  auto logits = device_f32({1, 2, 3, 4}, {4, 1}, device());
  auto teacher = device_f32({0, 0, 0, 0}, {4}, device());
  auto labels = device_i32({-100, -100, -100, -100}, {4}, device());
  auto loss = poisoned({1}, device()), residual = poisoned({4}, device());
  margin_mse_loss_forward(loss.view(), residual.view(), logits.view(), teacher.view(),
                          labels.view(), 2);
  EXPECT_TRUE(std::isnan(to_vector(loss.view())[0]));
  auto g = poisoned({4, 1}, device());
  margin_mse_loss_backward(g.view(), residual.view(), labels.view(), 2, 1.0f);
  for (float v : to_vector(g.view())) EXPECT_EQ(v, 0.0f);
}

TEST_P(MarginMseLossTest, BadShapesAreRefused) {
  auto two = device_f32({0, 1, 2, 3, 4, 5}, {3, 2}, device());
  auto teacher = device_f32({0, 1, 2}, {3}, device());
  auto labels = device_i32({0, 0, 0}, {3}, device());
  auto loss = poisoned({1}, device()), residual = poisoned({3}, device());
  EXPECT_THROW(margin_mse_loss_forward(loss.view(), residual.view(), two.view(), teacher.view(),
                                       labels.view(), 3),
               ShapeError);  // two scores a row
  auto one = device_f32({0, 1, 2}, {3, 1}, device());
  EXPECT_THROW(margin_mse_loss_forward(loss.view(), residual.view(), one.view(), teacher.view(),
                                       labels.view(), 2),
               ShapeError);  // 3 rows are not groups of 2
  EXPECT_THROW(margin_mse_loss_forward(loss.view(), residual.view(), one.view(), teacher.view(),
                                       labels.view(), 1),
               ShapeError);  // a group needs a negative
}

FTUNE_INSTANTIATE_DEVICES(MarginMseLossTest);

}  // namespace
}  // namespace ftune::test
