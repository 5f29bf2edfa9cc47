// Attention: forward (context and probabilities) vs a double-precision reference with padding
// masks and dropout; backward vs finite differences with the dropout mask held fixed; an
// all-padding row attends uniformly (HF's additive-mask behaviour); thread-count independence; the
// (row0, Tv) dropout layout: sequences cut into micro-batches of other padded lengths get the
// probability-dropout masks they get in the whole batch. A flat probs buffer (planned for cuDNN's
// state, ops/attention_cudnn.h) serves ftune's kernel when it holds the probabilities, with the
// same results, and is a clear error naming training.attention when it does not.
#include "ops/attention.h"

#include <cmath>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"
#include "op_test_util.h"
#include "ops/attention_cudnn.h"

namespace ftune::test {
namespace {

class AttentionTest : public OpTest {};

struct Ref {
  std::vector<double> out, probs;
};

// Dropout stream index of probs element (b, h, i, j): (((row0 + b) * H + h) * Tv + i) * Tv + j,
// Tv = T when 0.
Ref reference_attention(const std::vector<float>& qkv, const std::vector<int32_t>& mask, int64_t B,
                        int64_t T, int64_t H, int64_t D, float p, RngKey key, int64_t row0 = 0,
                        int64_t Tv = 0) {
  if (Tv == 0) Tv = T;
  const int64_t C = H * D;
  Ref r{std::vector<double>(B * T * C, 0.0), std::vector<double>(B * H * T * T, 0.0)};
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return double(qkv[(b * T + t) * 3 * C + part * C + h * D + d]);
  };
  for (int64_t b = 0; b < B; ++b) {
    bool any = false;
    for (int64_t j = 0; j < T; ++j) any |= mask[b * T + j] != 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(T);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          s[j] = (!any || mask[b * T + j]) ? dot / std::sqrt(double(D)) : -INFINITY;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += (s[j] = any ? std::exp(s[j] - mx) : 1.0);
        for (int64_t j = 0; j < T; ++j) {
          const int64_t e = ((b * H + h) * T + i) * T + j;
          const uint64_t stream = uint64_t((((row0 + b) * H + h) * Tv + i) * Tv + j);
          const double prob = s[j] / sum;
          r.probs[e] = prob;
          const double keep =
              p > 0 ? (philox_uniform_at(key, stream) >= p ? 1.0 / (1.0 - p) : 0.0) : 1.0;
          for (int64_t d = 0; d < D; ++d)
            r.out[(b * T + i) * C + h * D + d] += prob * keep * at(b, j, 2, h, d);
        }
      }
  }
  return r;
}

struct Case {
  int64_t B = 3, T = 7, H = 2, D = 4;
  std::vector<int32_t> mask;
};

Case make_case() {
  Case c;
  // row 0 full, row 1 padded after 4 tokens, row 2 all padding (uniform attention)
  c.mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  return c;
}

TEST_P(AttentionTest, ForwardMatchesReferenceWithMaskAndDropout) {
  const Case c = make_case();
  const int64_t C = c.H * c.D;
  for (float p : {0.0f, 0.25f}) {
    auto qkv = random_values(c.B * c.T * 3 * C, rng, -2, 2);
    const RngKey key{77, 3, 1};
    auto dq = device_f32(qkv, {c.B, c.T, 3 * C}, device());
    auto dm = device_i32(c.mask, {c.B, c.T}, device());
    auto out = poisoned({c.B, c.T, C}, device()), probs = poisoned({c.B, c.H, c.T, c.T}, device());
    auto ws = zeros({attention_workspace(c.T, c.D)}, device());
    attention_forward(out.view(), probs.view(), dq.view(), dm.view(), int(c.H), p, key, ws.view());
    const Ref ref = reference_attention(qkv, c.mask, c.B, c.T, c.H, c.D, p, key);
    const auto got = to_vector(out.view()), gp = to_vector(probs.view());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], ref.out[i], 2e-5) << "p=" << p << " out " << i;
    for (size_t i = 0; i < gp.size(); ++i) EXPECT_NEAR(gp[i], ref.probs[i], 1e-6) << "probs " << i;
    // Padding keys get exactly zero probability in the rows that have real keys.
    EXPECT_EQ(gp[((1 * c.H + 0) * c.T + 2) * c.T + 5], 0.0f);
    // The all-padding row attends uniformly.
    EXPECT_NEAR(gp[((2 * c.H + 1) * c.T + 3) * c.T + 6], 1.0 / c.T, 1e-7);
  }
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  // Every row keeps a real key here: an all-padding row's forward does not depend on Q and K
  // (uniform attention), while its backward follows HF's autograd through the additive mask.
  Case c = make_case();
  c.mask[2 * c.T] = c.mask[2 * c.T + 1] = 1;
  const int64_t C = c.H * c.D, n = c.B * c.T * 3 * C;
  const float p = 0.2f;
  const RngKey key{5, 9, 2};
  auto qkv = random_values(n, rng, -1, 1);
  const auto r = random_values(c.B * c.T * C, rng);
  auto ws = zeros({attention_workspace(c.T, c.D)}, device());
  auto dm = device_i32(c.mask, {c.B, c.T}, device());
  auto run = [&](DeviceTensor& dq, DeviceTensor& out, DeviceTensor& probs) {
    attention_forward(out.view(), probs.view(), dq.view(), dm.view(), int(c.H), p, key, ws.view());
  };
  auto loss = [&]() {
    auto dq = device_f32(qkv, {c.B, c.T, 3 * C}, device());
    auto out = poisoned({c.B, c.T, C}, device()), probs = poisoned({c.B, c.H, c.T, c.T}, device());
    run(dq, out, probs);
    return weighted_sum(to_vector(out.view()), r);
  };
  auto dq = device_f32(qkv, {c.B, c.T, 3 * C}, device());
  auto out = poisoned({c.B, c.T, C}, device()), probs = poisoned({c.B, c.H, c.T, c.T}, device());
  run(dq, out, probs);
  auto dout = device_f32(r, {c.B, c.T, C}, device());
  auto dqkv = poisoned({c.B, c.T, 3 * C}, device());
  attention_backward(dqkv.view(), dout.view(), dq.view(), probs.view(), dm.view(), int(c.H), p, key,
                     ws.view());
  expect_gradient(loss, qkv.data(), n, to_vector(dqkv.view()), 2e-3, "dqkv", 1e-2f, 400);
}

TEST_P(AttentionTest, ResultsDoNotDependOnThreadCount) {
  const int64_t B = 2, T = 9, H = 3, D = 5, C = H * D;
  auto qkv = random_values(B * T * 3 * C, rng);
  std::vector<int32_t> mask(B * T, 1);
  mask[T + 7] = mask[T + 8] = 0;
  const auto r = random_values(B * T * C, rng);
  std::vector<float> first_out, first_grad;
  for (int threads : {1, 2, 4}) {
    set_compute_threads(threads);
    auto dq = device_f32(qkv, {B, T, 3 * C}, device());
    auto dm = device_i32(mask, {B, T}, device());
    auto ws = zeros({attention_workspace(T, D)}, device());
    auto out = poisoned({B, T, C}, device()), probs = poisoned({B, H, T, T}, device());
    attention_forward(out.view(), probs.view(), dq.view(), dm.view(), int(H), 0.1f, RngKey{1, 2, 3},
                      ws.view());
    auto dout = device_f32(r, {B, T, C}, device());
    auto dqkv = poisoned({B, T, 3 * C}, device());
    attention_backward(dqkv.view(), dout.view(), dq.view(), probs.view(), dm.view(), int(H), 0.1f,
                       RngKey{1, 2, 3}, ws.view());
    if (first_out.empty()) {
      first_out = to_vector(out.view());
      first_grad = to_vector(dqkv.view());
    }
    EXPECT_EQ(to_vector(out.view()), first_out);
    EXPECT_EQ(to_vector(dqkv.view()), first_grad);
  }
  set_compute_threads(0);
}

TEST_P(AttentionTest, MicroBatchesOfAStepGetTheWholeBatchMasks) {
  // Rows of real lengths 2, 4, 6 padded to 6 as one batch; cut as row 0 (padded to 2) and rows
  // 1-2 (padded to 6), each placed at its row of the step batch with the stream length Tv = 9.
  const int64_t B = 3, T = 6, H = 2, D = 4, C = H * D, Tv = 9;
  const std::vector<int64_t> len = {2, 4, 6};
  const float p = 0.5f;
  const RngKey key{31, 4, 6};
  const auto qkv = random_values(B * T * 3 * C, rng, -2, 2);
  auto forward = [&](const std::vector<float>& q, const std::vector<int32_t>& m, int64_t rows,
                     int64_t seq, uint64_t row0) {
    auto dq = device_f32(q, {rows, seq, 3 * C}, device());
    auto dm = device_i32(m, {rows, seq}, device());
    auto ws = zeros({attention_workspace(seq, D)}, device());
    auto out = poisoned({rows, seq, C}, device()), probs = poisoned({rows, H, seq, seq}, device());
    attention_forward(out.view(), probs.view(), dq.view(), dm.view(), int(H), p, key, ws.view(),
                      DropoutRows{row0, seq, Tv});
    return to_vector(out.view());
  };
  auto cut = [&](int64_t r0, int64_t n, int64_t seq) {
    std::vector<float> q(n * seq * 3 * C, 0.0f);
    std::vector<int32_t> m(n * seq, 0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t t = 0; t < len[r0 + b]; ++t) {
        m[b * seq + t] = 1;
        for (int64_t k = 0; k < 3 * C; ++k)
          q[(b * seq + t) * 3 * C + k] = qkv[((r0 + b) * T + t) * 3 * C + k];
      }
    return std::pair{q, m};
  };
  const auto [wq, wm] = cut(0, B, T);
  const auto whole = forward(wq, wm, B, T, 0);
  const Ref ref = reference_attention(wq, wm, B, T, H, D, p, key, 0, Tv);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], ref.out[i], 2e-5) << i;
  struct Part {
    int64_t r0, n, seq;
  };
  for (const Part part : {Part{0, 1, 2}, Part{1, 2, 6}}) {
    const auto [q, m] = cut(part.r0, part.n, part.seq);
    const auto got = forward(q, m, part.n, part.seq, uint64_t(part.r0));
    for (int64_t b = 0; b < part.n; ++b)
      for (int64_t t = 0; t < len[part.r0 + b]; ++t)
        for (int64_t c = 0; c < C; ++c)
          EXPECT_NEAR(got[(b * part.seq + t) * C + c], whole[((part.r0 + b) * T + t) * C + c], 1e-6)
              << "rows from " << part.r0 << " b " << b << " t " << t;
    // Placed at row 0 instead, the same rows draw other masks and give another result.
    if (part.r0 > 0) {
      const auto wrong = forward(q, m, part.n, part.seq, 0);
      double diff = 0;
      for (size_t i = 0; i < got.size(); ++i)
        diff = std::max(diff, double(std::fabs(got[i] - wrong[i])));
      EXPECT_GT(diff, 1e-3);
    }
  }
}

TEST_P(AttentionTest, MatchesTheCpuOpWithPaddingDropoutAndManyHeads) {
  // The device result against the CPU op itself (on the CPU device the two are the same code), in
  // two shapes: rows longer than a CUDA block (130 keys) with a head size over one block (D = 136);
  // and many (b, h) pairs of short rows, with one compute thread so that the workspace is the
  // smallest the op accepts (the CUDA backward then walks the heads in several chunks). Padding in
  // the middle and at the end, all-padding rows (whose backward the finite-difference test leaves
  // out) and dropout placed by (row0, Tv).
  struct Shape4 {
    int64_t B, T, H, D;
  };
  const float p = 0.3f;
  const RngKey key{123, 7, 11};
  set_compute_threads(1);
  for (const Shape4 sh : {Shape4{3, 130, 2, 136}, Shape4{20, 5, 4, 8}}) {
    const int64_t B = sh.B, T = sh.T, H = sh.H, D = sh.D, C = H * D;
    const DropoutRows rows{5, T, T + 10};
    std::vector<int32_t> mask(B * T, 1);
    for (int64_t b = 0; b < B; ++b) {
      if (b % 3 == 1) {  // real tokens then padding, and one padding key inside
        for (int64_t t = T * 2 / 3; t < T; ++t) mask[b * T + t] = 0;
        mask[b * T + 1] = 0;
      }
      if (b % 3 == 2)
        for (int64_t t = 0; t < T; ++t) mask[b * T + t] = 0;  // all padding
    }
    const auto qkv = random_values(B * T * 3 * C, rng, -2, 2);
    const auto dout = random_values(B * T * C, rng);
    struct Result {
      std::vector<float> out, probs, dqkv;
    };
    auto run = [&](Device dev) {
      auto dq = device_f32(qkv, {B, T, 3 * C}, dev);
      auto dm = device_i32(mask, {B, T}, dev);
      auto ws = zeros({attention_workspace(T, D)}, dev);
      auto out = poisoned({B, T, C}, dev), probs = poisoned({B, H, T, T}, dev);
      attention_forward(out.view(), probs.view(), dq.view(), dm.view(), int(H), p, key, ws.view(),
                        rows);
      auto ddo = device_f32(dout, {B, T, C}, dev);
      auto dqkv = poisoned({B, T, 3 * C}, dev);
      attention_backward(dqkv.view(), ddo.view(), dq.view(), probs.view(), dm.view(), int(H), p,
                         key, ws.view(), rows);
      return Result{to_vector(out.view()), to_vector(probs.view()), to_vector(dqkv.view())};
    };
    const Result want = run(Device::cpu()), got = run(device());
    auto check = [&](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
      ASSERT_EQ(a.size(), b.size()) << what;
      double scale = 1e-6;
      for (float x : b) scale = std::max(scale, double(std::fabs(x)));
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-5 * scale) << what << " element " << i << " T=" << T;
    };
    check(got.out, want.out, "out");
    check(got.probs, want.probs, "probs");
    check(got.dqkv, want.dqkv, "dqkv");
  }
  set_compute_threads(0);
}

TEST_P(AttentionTest, FlatStateBufferServesFtunesKernelOnlyWhenItHoldsTheProbabilities) {
  // fp32 never runs through cuDNN: a flat buffer is ftune's (B, H, T, T) probabilities at its
  // start when it is that large, else the call fails before touching anything.
  const Case c = make_case();
  const int64_t C = c.H * c.D, n_probs = c.B * c.H * c.T * c.T;
  const float p = 0.25f;
  const RngKey key{9, 4, 2};
  const auto qkv = random_values(c.B * c.T * 3 * C, rng, -2, 2);
  const auto r = random_values(c.B * c.T * C, rng);
  auto dq = device_f32(qkv, {c.B, c.T, 3 * C}, device());
  auto dm = device_i32(c.mask, {c.B, c.T}, device());
  auto ws = zeros({attention_workspace(c.T, c.D)}, device());
  auto dout = device_f32(r, {c.B, c.T, C}, device());
  auto run = [&](TensorView probs) {
    auto out = poisoned({c.B, c.T, C}, device());
    auto dqkv = poisoned({c.B, c.T, 3 * C}, device());
    attention_forward(out.view(), probs, dq.view(), dm.view(), int(c.H), p, key, ws.view());
    attention_backward(dqkv.view(), dout.view(), dq.view(), probs, dm.view(), int(c.H), p, key,
                       ws.view());
    return std::pair{to_vector(out.view()), to_vector(dqkv.view())};
  };
  auto full = poisoned({c.B, c.H, c.T, c.T}, device());
  auto flat = poisoned({n_probs + 5}, device());
  const auto want = run(full.view());
  EXPECT_EQ(run(flat.view()), want);
  EXPECT_EQ(to_vector(flat.view().flat_range(0, n_probs)), to_vector(full.view()));
  // cuDNN's state for this shape is far smaller than the probabilities: ftune's kernel cannot run.
  const int64_t state = cudnn_attention_state_floats(c.B, c.H, c.T);
  ASSERT_LT(state, n_probs);
  auto small = poisoned({state}, device());
  auto out = poisoned({c.B, c.T, C}, device());
  try {
    attention_forward(out.view(), small.view(), dq.view(), dm.view(), int(c.H), p, key, ws.view());
    FAIL() << "a state-sized buffer ran ftune's kernel";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("attention_forward"), std::string::npos) << m;
    EXPECT_NE(m.find("training.attention: ftune"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(n_probs)), std::string::npos) << m;
  }
  auto dqkv = poisoned({c.B, c.T, 3 * C}, device());
  EXPECT_THROW(attention_backward(dqkv.view(), dout.view(), dq.view(), small.view(), dm.view(),
                                  int(c.H), p, key, ws.view()),
               ShapeError);
  // Nothing was written.
  for (float v : to_vector(out.view())) ASSERT_TRUE(std::isnan(v));
  // A flat buffer must be f32.
  auto wrong = zeros({n_probs}, device(), DType::BF16);
  EXPECT_THROW(attention_forward(out.view(), wrong.view(), dq.view(), dm.view(), int(c.H), p, key,
                                 ws.view()),
               ShapeError);
}

// The layout of cuDNN's state documented in ops/attention_cudnn.h, computed independently.
TEST(CudnnAttentionState, FollowsTheDocumentedLayout) {
  auto align16 = [](int64_t n) { return (n + 15) / 16 * 16; };
  for (const auto& [B, H, T] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 2, 7}, {32, 12, 512}, {5, 12, 77}}) {
    const int64_t S = align16(4 * B * H * T), R = align16(S + 8 * B), G = R + 16,
                  end = G + 16 * (B + 1);
    EXPECT_EQ(cudnn_attention_state_floats(B, H, T) * 4, end) << B << " " << H << " " << T;
  }
  // BERT-base, B=32, T=512: 0.75 MiB instead of 384 MiB of probabilities per layer.
  EXPECT_LT(cudnn_attention_state_floats(32, 12, 512) * 4, (size_t{3} << 18) + 1024);
  EXPECT_TRUE(uses_cudnn_attention(AttentionKernel::Cudnn, Device::cuda(0), DType::BF16));
  EXPECT_TRUE(uses_cudnn_attention(AttentionKernel::Cudnn, Device::cuda(0), DType::F16));
  EXPECT_FALSE(uses_cudnn_attention(AttentionKernel::Cudnn, Device::cuda(0), DType::F32));
  EXPECT_FALSE(uses_cudnn_attention(AttentionKernel::Cudnn, Device::cpu(), DType::BF16));
  EXPECT_FALSE(uses_cudnn_attention(AttentionKernel::Ftune, Device::cuda(0), DType::BF16));
}

// The up-front check says why cuDNN cannot run a shape: fp32, and here no GPU or no CUDA build.
TEST(CudnnAttentionState, ProbeSaysWhyItRefuses) {
  EXPECT_NE(cudnn_attention_probe(Device::cuda(0), 2, 64, 2, 64, DType::F32, 0.1f).find("16-bit"),
            std::string::npos);
  if (cuda_device_count() == 0)
    EXPECT_NE(cudnn_attention_probe(Device::cuda(0), 2, 64, 2, 64, DType::BF16, 0.1f), "");
  // A device that is not there is named, not probed on another one.
  EXPECT_NE(cudnn_attention_probe(Device::cuda(63), 2, 64, 2, 64, DType::BF16, 0.1f), "");
}

FTUNE_INSTANTIATE_DEVICES(AttentionTest);

}  // namespace
}  // namespace ftune::test
