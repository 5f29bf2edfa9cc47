// Listwise loss: loss and gradient vs PyTorch (FlagEmbedding's reranker loss on a one-score head;
// a two-logit head with graded relevance and uneven groups: tests/fixtures/ranking/
// listwise_loss.json, tools/make_ranking_fixtures.py), gradient vs finite differences, the
// dloss_at factor, and CUDA vs CPU where a GPU exists.
#include "ops/listwise_loss.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "op_test_util.h"

namespace ftune::test {
namespace {

class ListwiseLossTest : public OpTest {};

TEST_P(ListwiseLossTest, MatchesPyTorch) {
  std::ifstream in(fixtures_dir() + "/ranking/listwise_loss.json");
  const auto fixture = nlohmann::json::parse(in);
  ASSERT_EQ(fixture["cases"].size(), 2u);
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t K = c["num_labels"];
    const auto z = c["logits"].get<std::vector<float>>();
    const auto rel = c["relevance"].get<std::vector<float>>();
    const auto off = c["offsets"].get<std::vector<int32_t>>();
    const int64_t N = static_cast<int64_t>(rel.size()), G = static_cast<int64_t>(off.size()) - 1;
    auto logits = device_f32(z, {N, K}, device());
    auto relevance = device_f32(rel, {N}, device());
    auto offsets = device_i32(off, {G + 1}, device());
    auto loss = poisoned({1}, device()), probs = poisoned({N}, device());
    auto dlogits = poisoned({N, K}, device());
    listwise_loss_forward(loss.view(), probs.view(), logits.view(), relevance.view(),
                          offsets.view());
    listwise_loss_backward(dlogits.view(), probs.view(), relevance.view(), offsets.view(), 1.0f);
    EXPECT_NEAR(to_vector(loss.view())[0], c["loss"].get<double>(), 1e-6);
    expect_close(to_vector(dlogits.view()), c["dlogits"].get<std::vector<double>>(), 1e-6,
                 "dlogits");
  }
}

TEST_P(ListwiseLossTest, GradientMatchesFiniteDifferencesAndDlossAtScales) {
  for (int64_t K : {1, 2}) {
    const std::vector<int32_t> off{0, 4, 4, 7, 8, 13};  // an empty group, a one-row group
    const std::vector<float> rel{1, 0, 0, 0, /**/ 0, 2, 1, /**/ 0, /**/ 0, 0, 1, 0, 1};
    const int64_t N = 13, G = 5;
    auto z = random_values(N * K, rng, -3, 3);
    auto relevance = device_f32(rel, {N}, device());
    auto offsets = device_i32(off, {G + 1}, device());
    auto loss_fn = [&]() {
      auto logits = device_f32(z, {N, K}, device());
      auto loss = poisoned({1}, device()), probs = poisoned({N}, device());
      listwise_loss_forward(loss.view(), probs.view(), logits.view(), relevance.view(),
                            offsets.view());
      return double(to_vector(loss.view())[0]);
    };
    auto logits = device_f32(z, {N, K}, device());
    auto loss = poisoned({1}, device()), probs = poisoned({N}, device());
    listwise_loss_forward(loss.view(), probs.view(), logits.view(), relevance.view(),
                          offsets.view());
    auto g = poisoned({N, K}, device());
    listwise_loss_backward(g.view(), probs.view(), relevance.view(), offsets.view(), 1.0f);
    const auto grad = to_vector(g.view());
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(grad[7 * K + k], 0.0f);  // group without positive
    expect_gradient(loss_fn, z.data(), N * K, grad, 2e-3, "dlogits", 1e-2f, 100);
    // dloss times the factor read from device memory.
    auto factor = device_f32({0.25f}, {1}, device());
    auto g2 = poisoned({N, K}, device());
    listwise_loss_backward(g2.view(), probs.view(), relevance.view(), offsets.view(), 2.0f,
                           factor.view().data_as<float>());
    const auto grad2 = to_vector(g2.view());
    for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(grad2[i], 0.5f * grad[i], 1e-7f) << i;
  }
}

TEST_P(ListwiseLossTest, ManyGroupsMatchTheCpu) {
  // More groups than the block has threads.
  const int64_t G = 700, gs = 8, N = G * gs, K = 2;
  auto z = random_values(N * K, rng, -4, 4);
  std::vector<float> rel(N, 0.0f);
  std::vector<int32_t> off(G + 1);
  for (int64_t g = 0; g <= G; ++g) off[g] = static_cast<int32_t>(g * gs);
  for (int64_t g = 0; g < G; ++g) rel[g * gs + g % gs] = g % 11 == 5 ? 0.0f : 1.0f;
  auto run = [&](Device dev, std::vector<float>& grad_out) {
    auto logits = device_f32(z, {N, K}, dev), relevance = device_f32(rel, {N}, dev);
    auto offsets = device_i32(off, {G + 1}, dev);
    auto loss = poisoned({1}, dev), probs = poisoned({N}, dev), g = poisoned({N, K}, dev);
    listwise_loss_forward(loss.view(), probs.view(), logits.view(), relevance.view(),
                          offsets.view());
    listwise_loss_backward(g.view(), probs.view(), relevance.view(), offsets.view(), 0.5f);
    grad_out = to_vector(g.view());
    return to_vector(loss.view())[0];
  };
  std::vector<float> g_cpu, g_dev;
  const float l_cpu = run(Device::cpu(), g_cpu), l_dev = run(device(), g_dev);
  EXPECT_NEAR(l_dev, l_cpu, 1e-6 * std::fabs(l_cpu));
  for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(g_dev[i], g_cpu[i], 1e-9) << i;
}

TEST_P(ListwiseLossTest, FixedGroupsOfLabelsEqualOffsetsAndRelevance) {
  // The trainer's layout: groups of group_size rows, the labels (one positive first, -100 ignored)
  // as relevance; the same as offsets g * group_size and relevance max(label, 0).
  const int64_t G = 5, gs = 4, N = G * gs;
  for (int64_t K : {1, 2}) {
    auto z = random_values(N * K, rng, -3, 3);
    std::vector<int32_t> y(N, 0), off(G + 1);
    std::vector<float> rel(N, 0.0f);
    for (int64_t g = 0; g <= G; ++g) off[g] = static_cast<int32_t>(g * gs);
    for (int64_t g = 0; g < G; ++g) y[g * gs] = g == 3 ? 0 : 1;  // group 3: no positive
    y[6] = -100;
    for (int64_t i = 0; i < N; ++i) rel[i] = std::max(y[i], 0);
    auto logits = device_f32(z, {N, K}, device());
    auto labels = device_i32(y, {N}, device());
    auto relevance = device_f32(rel, {N}, device());
    auto offsets = device_i32(off, {G + 1}, device());
    auto l1 = poisoned({1}, device()), l2 = poisoned({1}, device());
    auto p1 = poisoned({N}, device()), p2 = poisoned({N}, device());
    auto g1 = poisoned({N, K}, device()), g2 = poisoned({N, K}, device());
    listwise_loss_forward(l1.view(), p1.view(), logits.view(), labels.view(), gs);
    listwise_loss_backward(g1.view(), p1.view(), labels.view(), gs, 0.5f);
    listwise_loss_forward(l2.view(), p2.view(), logits.view(), relevance.view(), offsets.view());
    listwise_loss_backward(g2.view(), p2.view(), relevance.view(), offsets.view(), 0.5f);
    EXPECT_EQ(to_vector(l1.view())[0], to_vector(l2.view())[0]);
    EXPECT_EQ(to_vector(g1.view()), to_vector(g2.view()));
    EXPECT_GT(std::fabs(to_vector(l1.view())[0]), 0.0f);
  }
  auto logits = device_f32(std::vector<float>(6, 0.0f), {6, 1}, device());
  auto labels = device_i32({1, 0, 0, 1, 0, 0}, {6}, device());
  auto loss = poisoned({1}, device()), probs = poisoned({6}, device());
  EXPECT_THROW(listwise_loss_forward(loss.view(), probs.view(), logits.view(), labels.view(), 4),
               ShapeError);  // 6 rows are not groups of 4
}

TEST_P(ListwiseLossTest, FixedGroupsOfFloatRelevanceEqualOffsets) {
  // A one-score head's listwise training: groups of group_size rows, the float targets (0/1
  // relevance, the positive first) as relevance; the same as the offsets layout.
  const int64_t G = 4, gs = 3, N = G * gs;
  auto z = random_values(N, rng, -3, 3);
  std::vector<float> rel(N, 0.0f);
  std::vector<int32_t> off(G + 1);
  for (int64_t g = 0; g <= G; ++g) off[g] = static_cast<int32_t>(g * gs);
  for (int64_t g = 0; g < G; ++g) rel[g * gs] = g == 2 ? 0.0f : 1.0f;  // group 2: no positive
  auto logits = device_f32(z, {N, 1}, device());
  auto relevance = device_f32(rel, {N}, device());
  auto offsets = device_i32(off, {G + 1}, device());
  auto l1 = poisoned({1}, device()), l2 = poisoned({1}, device());
  auto p1 = poisoned({N}, device()), p2 = poisoned({N}, device());
  auto g1 = poisoned({N, 1}, device()), g2 = poisoned({N, 1}, device());
  listwise_loss_forward(l1.view(), p1.view(), logits.view(), relevance.view(), gs);
  listwise_loss_backward(g1.view(), p1.view(), relevance.view(), gs, 0.5f);
  listwise_loss_forward(l2.view(), p2.view(), logits.view(), relevance.view(), offsets.view());
  listwise_loss_backward(g2.view(), p2.view(), relevance.view(), offsets.view(), 0.5f);
  EXPECT_EQ(to_vector(l1.view())[0], to_vector(l2.view())[0]);
  EXPECT_EQ(to_vector(g1.view()), to_vector(g2.view()));
  EXPECT_GT(to_vector(l1.view())[0], 0.0f);
}

TEST_P(ListwiseLossTest, BadShapesAndRelevanceAreRefused) {
  auto logits = device_f32({0, 1, 2, 3, 4, 5}, {2, 3}, device());
  auto relevance = device_f32({1, 0}, {2}, device());
  auto offsets = device_i32({0, 2}, {2}, device());
  auto loss = poisoned({1}, device()), probs = poisoned({2}, device());
  EXPECT_THROW(listwise_loss_forward(loss.view(), probs.view(), logits.view(), relevance.view(),
                                     offsets.view()),
               ShapeError);  // three logits a row
  auto l1 = device_f32({0, 1}, {2, 1}, device());
  auto bad_off = device_i32({0, 1}, {2}, device());
  if (device().is_cpu()) {
    EXPECT_THROW(listwise_loss_forward(loss.view(), probs.view(), l1.view(), relevance.view(),
                                       bad_off.view()),
                 ShapeError);  // offsets end before the last row
    auto neg = device_f32({-1, 1}, {2}, device());
    EXPECT_THROW(
        listwise_loss_forward(loss.view(), probs.view(), l1.view(), neg.view(), offsets.view()),
        InputError);
  }
}

FTUNE_INSTANTIATE_DEVICES(ListwiseLossTest);

}  // namespace
}  // namespace ftune::test
