// The chunked causal-LM loss (ops/lm_head_loss.h) against the plain path that materialises every
// logit: a double-precision reference and ftune's own cross-entropy op on the full logits. Any
// chunking (one block, blocks that do not divide T or V, a vocabulary chunk of 1) gives the same
// loss and gradients; ignored tokens add nothing; an outside normalizer divides instead of the
// count; gradients accumulate; the workspace is one block and is never overrun.
#include "ops/lm_head_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/cross_entropy.h"
#include "ops/primitives_cpu.h"

namespace ftune {
namespace {

struct Problem {
  int64_t T = 37, H = 16, V = 301;
  std::vector<float> h, W;
  std::vector<int32_t> y;
  explicit Problem(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    h.resize(T * H), W.resize(V * H), y.resize(T);
    for (float& v : h) v = n(rng);
    for (float& v : W) v = 0.5f * n(rng);
    for (int64_t t = 0; t < T; ++t) y[t] = (t % 5 == 1) ? -100 : static_cast<int32_t>(rng() % V);
  }
};

struct Result {
  double loss = 0;
  std::vector<double> dh, dW;
};

// Every logit in double: loss = mean (or / normalizer) of lse - target; its gradients. cap > 0:
// the logits soft-capped first, z = cap tanh(x / cap).
Result reference(const Problem& p, double normalizer, double dloss, double cap = 0) {
  Result r;
  r.dh.assign(p.T * p.H, 0.0), r.dW.assign(p.V * p.H, 0.0);
  int64_t n = 0;
  for (int32_t y : p.y) n += y >= 0;
  const double N = normalizer > 0 ? normalizer : n;
  std::vector<double> z(p.V);
  for (int64_t t = 0; t < p.T; ++t) {
    if (p.y[t] < 0) continue;
    double mx = -1e300;
    for (int64_t v = 0; v < p.V; ++v) {
      z[v] = 0;
      for (int64_t k = 0; k < p.H; ++k) z[v] += double(p.h[t * p.H + k]) * p.W[v * p.H + k];
      if (cap > 0) z[v] = cap * std::tanh(z[v] / cap);
      mx = std::max(mx, z[v]);
    }
    double sum = 0;
    for (int64_t v = 0; v < p.V; ++v) sum += std::exp(z[v] - mx);
    const double lse = mx + std::log(sum);
    r.loss += (lse - z[p.y[t]]) / N;
    for (int64_t v = 0; v < p.V; ++v) {
      double g = (std::exp(z[v] - lse) - (v == p.y[t])) * dloss / N;
      if (cap > 0) g *= 1 - (z[v] / cap) * (z[v] / cap);
      for (int64_t k = 0; k < p.H; ++k) {
        r.dh[t * p.H + k] += g * p.W[v * p.H + k];
        r.dW[v * p.H + k] += g * p.h[t * p.H + k];
      }
    }
  }
  return r;
}

struct Fused {
  float loss = 0;
  int64_t counted = 0;
  std::vector<float> dh, dW;
};

constexpr float kGuard = 12345.0f;

Fused fused(const Problem& p, int64_t tc, int64_t vc, double normalizer, float dloss,
            float dh0 = 0.0f, float cap = 0.0f) {
  LmHeadLossShape s{p.T, p.H, p.V, tc, vc, cap};
  const int64_t ws_size = lm_head_loss_workspace(s);
  EXPECT_EQ(ws_size, std::min(tc, p.T) * std::min(vc, p.V));
  std::vector<float> ws(ws_size + 64, kGuard), lse(p.T);
  Fused f;
  f.counted = cpu::lm_head_loss_forward(&f.loss, lse.data(), p.h.data(), p.W.data(), p.y.data(),
                                        normalizer, s, ws.data());
  f.dh.assign(p.T * p.H, dh0), f.dW.assign(p.V * p.H, dh0);
  cpu::lm_head_loss_backward(f.dh.data(), f.dW.data(), lse.data(), p.h.data(), p.W.data(),
                             p.y.data(), normalizer, dloss, s, ws.data());
  for (int64_t i = ws_size; i < ws_size + 64; ++i) EXPECT_EQ(ws[i], kGuard) << "workspace overrun";
  return f;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  double offset = 0.0) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - offset - want[i]));
  EXPECT_LT(worst, tol);
}

TEST(LmHeadLoss, EveryChunkingMatchesTheDoubleReference) {
  const Problem p(3);
  const Result want = reference(p, 0, 1.0);
  for (auto [tc, vc] :
       {std::pair<int64_t, int64_t>{256, 4096}, {8, 64}, {5, 1000}, {37, 301}, {1, 1}, {13, 17}}) {
    SCOPED_TRACE(testing::Message() << "chunks " << tc << " x " << vc);
    const Fused f = fused(p, tc, vc, 0, 1.0f);
    EXPECT_EQ(f.counted, 29);  // 37 tokens, every 5th from the 2nd ignored
    EXPECT_NEAR(f.loss, want.loss, 2e-6 * std::abs(want.loss));
    expect_close(f.dh, want.dh, 2e-6);
    expect_close(f.dW, want.dW, 2e-6);
  }
}

// Gemma 2's final logit soft-capping, at a cap the logits reach (|x| up to ~6 here, cap 2).
TEST(LmHeadLoss, SoftCappedLogitsMatchTheDoubleReference) {
  const Problem p(13);
  const Result want = reference(p, 0, 1.0, 2.0);
  const Result uncapped = reference(p, 0, 1.0);
  EXPECT_GT(std::abs(want.loss - uncapped.loss), 0.1);  // the cap changes the loss
  for (auto [tc, vc] : {std::pair<int64_t, int64_t>{256, 4096}, {5, 17}}) {
    const Fused f = fused(p, tc, vc, 0, 1.0f, 0.0f, 2.0f);
    EXPECT_NEAR(f.loss, want.loss, 2e-6 * std::abs(want.loss));
    expect_close(f.dh, want.dh, 2e-6);
    expect_close(f.dW, want.dW, 2e-6);
  }
}

TEST(LmHeadLoss, EqualsCrossEntropyOverTheMaterialisedLogits) {
  const Problem p(5);
  std::vector<float> logits(p.T * p.V), probs(p.T * p.V), dlogits(p.T * p.V);
  cpu::gemm(false, true, p.T, p.V, p.H, 1.0f, p.h.data(), p.H, p.W.data(), p.H, 0.0f, logits.data(),
            p.V);
  float plain = 0;
  cpu::cross_entropy_forward(&plain, probs.data(), logits.data(), p.y.data(), nullptr, 0.0f, p.T,
                             p.V);
  cpu::cross_entropy_backward(dlogits.data(), probs.data(), p.y.data(), nullptr, 0.0f, 0.7f, p.T,
                              p.V);
  std::vector<float> dh(p.T * p.H);
  cpu::gemm(false, false, p.T, p.H, p.V, 1.0f, dlogits.data(), p.V, p.W.data(), p.H, 0.0f,
            dh.data(), p.H);
  const Fused f = fused(p, 8, 50, 0, 0.7f);
  EXPECT_NEAR(f.loss, plain, 1e-6 * std::abs(plain));
  std::vector<double> want(dh.begin(), dh.end());
  expect_close(f.dh, want, 1e-6);
}

TEST(LmHeadLoss, ANormalizerDividesAndGradientsAccumulate) {
  const Problem p(7);
  const Result want = reference(p, 100.0, 2.0);
  const Fused f = fused(p, 16, 128, 100.0, 2.0f, /*dh0=*/1.0f);
  EXPECT_NEAR(f.loss, want.loss, 2e-6 * std::abs(want.loss));
  expect_close(f.dh, want.dh, 2e-6, 1.0);  // added to the 1s already there
  expect_close(f.dW, want.dW, 2e-6, 1.0);
}

TEST(LmHeadLoss, NothingCountedIsNaNAndNoGradient) {
  Problem p(9);
  std::fill(p.y.begin(), p.y.end(), -100);
  const Fused f = fused(p, 8, 64, 0, 1.0f, 0.5f);
  EXPECT_EQ(f.counted, 0);
  EXPECT_TRUE(std::isnan(f.loss));
  for (float v : f.dh) EXPECT_EQ(v, 0.5f);
  for (float v : f.dW) EXPECT_EQ(v, 0.5f);
}

TEST(LmHeadLoss, AFrozenProjectionGetsNoGradient) {
  const Problem p(11);
  LmHeadLossShape s{p.T, p.H, p.V, 8, 64};
  std::vector<float> ws(lm_head_loss_workspace(s)), lse(p.T), dh(p.T * p.H, 0.0f);
  float loss = 0;
  cpu::lm_head_loss_forward(&loss, lse.data(), p.h.data(), p.W.data(), p.y.data(), 0, s, ws.data());
  cpu::lm_head_loss_backward(dh.data(), nullptr, lse.data(), p.h.data(), p.W.data(), p.y.data(), 0,
                             1.0f, s, ws.data());
  expect_close(dh, reference(p, 0, 1.0).dh, 2e-6);
}

}  // namespace
}  // namespace ftune
