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

#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/op_test_util.h"
#include "ops/primitives_cpu.h"

namespace ftune {
namespace {

struct Problem {
  int64_t T = 37, H = 16, V = 301;
  std::vector<float> h, W;
  std::vector<int32_t> y;
  explicit Problem(uint64_t seed, int64_t tokens = 37, int64_t hidden = 16, int64_t vocab = 301)
      : T(tokens), H(hidden), V(vocab) {
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
  const LmHeadLossLayout L = lm_head_loss_layout(s);
  EXPECT_EQ(L.rows * L.cols, std::min(tc, p.T) * std::min(vc, p.V));  // one block, and
  EXPECT_LE(ws_size, L.rows * L.cols + 4 * L.rows + 12);                // the per-token state
  std::vector<float> ws(ws_size + 64, kGuard), lse(p.T);
  Fused f;
  f.counted = cpu::lm_head_loss_forward(&f.loss, lse.data(), p.h.data(), p.W.data(), p.y.data(),
                                        normalizer, s, ws.data());
  f.dh.assign(p.T * p.H, dh0), f.dW.assign(p.V * p.H, dh0);
  cpu::lm_head_loss_backward(f.dh.data(), f.dW.data(), lse.data(), p.h.data(), p.W.data(),
                             p.y.data(), normalizer, dloss, s, ws.data());
  for (int64_t i = ws_size; i < ws_size + 64; ++i) EXPECT_EQ(ws[i], kGuard) << "workspace overrun";
  const TensorView ws_view(ws.data(), DType::F32, Device::cpu(), Shape{ws_size});
  EXPECT_EQ(lm_head_loss_counted(ws_view, s), f.counted);  // kept in the workspace
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


// x rounded to a 16-bit type t and back, and stored in t.
std::vector<float> rounded(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> n(x.size());
  std::vector<float> out(x.size());
  cpu::cast(n.data(), t, x.data(), DType::F32, static_cast<int64_t>(x.size()));
  cpu::cast(out.data(), DType::F32, n.data(), t, static_cast<int64_t>(x.size()));
  return out;
}
std::vector<uint16_t> stored16(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> n(x.size());
  cpu::cast(n.data(), t, x.data(), DType::F32, static_cast<int64_t>(x.size()));
  return n;
}

double largest(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

// 16-bit operands: a frozen head stored in bf16 / f16 (a LoRA run's 16-bit base), or an fp32 head
// that trains with bf16 / f16 compute (autocast): the loss is the fp32 one of h and W rounded to
// that type (fp32 accumulation), and dh (and dW) follow at the 16-bit gradient's precision.
TEST(LmHeadLoss, SixteenBitOperandsGiveTheFp32LossOfTheRoundedValues) {
  const Problem p(17);
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const bool stored : {true, false}) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << (stored ? " head" : " compute"));
      Problem r = p;
      r.h = rounded(p.h, t);
      r.W = rounded(p.W, t);
      const Result want = reference(r, 0, 1.0), unrounded = reference(p, 0, 1.0);
      const double tol = 1e-6 * std::abs(want.loss);
      EXPECT_GT(std::abs(want.loss - unrounded.loss), 2 * tol);  // the rounding shows
      const std::vector<uint16_t> W16 = stored16(p.W, t);
      const LmHeadLossShape s{p.T, p.H, p.V, 8, 64, 0.0f, stored ? t : DType::F32,
                              stored ? DType::F32 : t};
      const void* W = stored ? static_cast<const void*>(W16.data()) : p.W.data();
      std::vector<float> ws(lm_head_loss_workspace(s)), lse(p.T), dh(p.T * p.H, 0.0f),
          dW(stored ? 0 : p.V * p.H, 0.0f);
      float loss = 0;
      EXPECT_EQ(
          cpu::lm_head_loss_forward(&loss, lse.data(), p.h.data(), W, p.y.data(), 0, s, ws.data()),
          29);
      EXPECT_NEAR(loss, want.loss, tol);
      cpu::lm_head_loss_backward(dh.data(), stored ? nullptr : dW.data(), lse.data(), p.h.data(),
                                 W, p.y.data(), 0, 1.0f, s, ws.data());
      const double rel = t == DType::BF16 ? 8e-3 : 1e-3;
      expect_close(dh, want.dh, rel * largest(want.dh));
      if (!stored) expect_close(dW, want.dW, rel * largest(want.dW));
    }
  }
}

// The op through its dispatch on each device present against the CPU op on the same inputs: the
// CUDA twin where a GPU is (the kit's test stage), the CPU against itself elsewhere.
class LmHeadLossDevices : public test::OpTest {};

struct DeviceCase {
  const char* name;
  int64_t T, H, V, token_chunk, vocab_chunk;
  float cap;
  DType head;
  double normalizer;
  bool ignore_all = false;
  DType compute = DType::F32;
};

struct DeviceRun {
  std::vector<float> loss, lse, dh, dW;
  int64_t counted = 0;
};

DeviceRun run_on(Device dev, const Problem& p, const DeviceCase& c) {
  const LmHeadLossShape s{p.T, p.H, p.V, c.token_chunk, c.vocab_chunk, c.cap, c.head, c.compute};
  const bool trained = c.head == DType::F32;
  HostTensor W(c.head, Shape{p.V, p.H});
  cpu::cast(W.view().data, c.head, p.W.data(), DType::F32, p.V * p.H);
  test::DeviceTensor dW_ = test::to_device(W, dev);
  test::DeviceTensor h = test::device_f32(p.h, {p.T, p.H}, dev), y = test::device_i32(p.y, {p.T}, dev);
  test::DeviceTensor loss = test::poisoned({1}, dev), lse = test::poisoned({std::max<int64_t>(p.T, 1)}, dev);
  test::DeviceTensor ws = test::poisoned({lm_head_loss_workspace(s)}, dev);
  // Gradients accumulate: both start at 1.
  test::DeviceTensor dh = test::device_f32(std::vector<float>(p.T * p.H, 1.0f), {p.T, p.H}, dev);
  test::DeviceTensor dW = test::device_f32(std::vector<float>(trained ? p.V * p.H : 1, 1.0f),
                               {trained ? p.V * p.H : 1}, dev);
  test::DeviceTensor share = test::device_f32({0.5f}, {1}, dev);  // the trainer's loss share, on the device
  const TensorView lse_v = lse.view().prefix({p.T});
  lm_head_loss_forward(loss.view(), lse_v, h.view(), dW_.view(), y.view(), c.normalizer, s,
                       ws.view());
  DeviceRun r;
  r.counted = lm_head_loss_counted(ws.view(), s);
  lm_head_loss_backward(dh.view(), trained ? dW.view().reshape({p.V, p.H}) : TensorView(), lse_v,
                        h.view(), dW_.view(), y.view(), c.normalizer, 2.0f,
                        share.view().data_as<float>(), s, ws.view());
  r.loss = test::to_vector(loss.view());
  r.lse = test::to_vector(lse_v);
  r.dh = test::to_vector(dh.view());
  if (trained) r.dW = test::to_vector(dW.view());
  return r;
}

double worst_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / scale;
}

TEST_P(LmHeadLossDevices, MatchesTheCpuOp) {
  const DeviceCase cases[] = {
      {"fp32 head that trains", 37, 16, 301, 8, 64, 0.0f, DType::F32, 0},
      {"fp32, soft-capped, odd chunks", 37, 16, 301, 5, 17, 2.0f, DType::F32, 0},
      {"fp32, one block, step normalizer", 37, 16, 301, 256, 4096, 0.0f, DType::F32, 100},
      {"bf16 frozen head", 37, 16, 301, 8, 64, 0.0f, DType::BF16, 0},
      {"f16 frozen head, soft-capped", 37, 16, 301, 16, 100, 2.0f, DType::F16, 0},
      {"bf16, 300 tokens x 5003 words in 128 x 1024 blocks", 300, 64, 5003, 128, 1024, 0.0f,
       DType::BF16, 0},
      {"fp32, 300 tokens x 5003 words, GPU-sized blocks", 300, 64, 5003, 1024, 8192, 0.0f,
       DType::F32, 0},
      {"fp32 head that trains, bf16 compute, soft-capped", 37, 16, 301, 8, 64, 2.0f, DType::F32,
       0, false, DType::BF16},
      {"fp32 head, f16 compute, 300 tokens x 5003 words", 300, 64, 5003, 128, 1024, 0.0f,
       DType::F32, 0, false, DType::F16},
      {"nothing counted", 37, 16, 301, 8, 64, 0.0f, DType::F32, 0, true},
  };
  for (const DeviceCase& c : cases) {
    SCOPED_TRACE(c.name);
    Problem p(23, c.T, c.H, c.V);
    if (c.ignore_all) std::fill(p.y.begin(), p.y.end(), -100);
    const DeviceRun want = run_on(Device::cpu(), p, c), got = run_on(device(), p, c);
    EXPECT_EQ(got.counted, want.counted);
    if (c.ignore_all) {
      EXPECT_TRUE(std::isnan(got.loss[0]));
      for (float v : got.dh) ASSERT_EQ(v, 1.0f);  // no gradient
      for (float v : got.dW) ASSERT_EQ(v, 1.0f);
      continue;
    }
    const bool half = c.head != DType::F32 || c.compute != DType::F32;
    EXPECT_NEAR(got.loss[0], want.loss[0], 1e-5 * std::abs(want.loss[0]));
    EXPECT_LT(worst_relative(got.lse, want.lse), 1e-5);
    // 16-bit: the gradient block is rounded to the head's type, where a value on a rounding
    // boundary may go either way.
    EXPECT_LT(worst_relative(got.dh, want.dh), half ? 5e-3 : 1e-5);
    if (c.head == DType::F32) EXPECT_LT(worst_relative(got.dW, want.dW), half ? 5e-3 : 1e-5);
    // The gradients moved away from their starting 1s.
    EXPECT_GT(worst_relative(want.dh, std::vector<float>(want.dh.size(), 1.0f)), 1e-3);
  }
}

// A label outside the vocabulary: the CPU stops; the GPU, which cannot stop without waiting for
// the host, gives a NaN loss.
TEST_P(LmHeadLossDevices, ALabelOutsideTheVocabularyIsCaught) {
  Problem p(29);
  p.y[3] = static_cast<int32_t>(p.V);
  const DeviceCase c{"bad label", p.T, p.H, p.V, 8, 64, 0.0f, DType::F32, 0};
  if (device().is_cpu()) {
    EXPECT_ANY_THROW(run_on(device(), p, c));
    return;
  }
  EXPECT_TRUE(std::isnan(run_on(device(), p, c).loss[0]));
}

FTUNE_INSTANTIATE_DEVICES(LmHeadLossDevices);

}  // namespace
}  // namespace ftune
