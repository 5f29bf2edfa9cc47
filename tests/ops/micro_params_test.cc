// Per-micro-batch values read from device memory (MicroParams, core/philox.h): every consumer —
// dropout (f32 and mixed types), attention forward/backward, LoRA's input dropout, the
// cross-entropy gradient scale and the step loss share — gives exactly what it gives with the same
// values passed directly, and follows the memory when it changes (what a replayed CUDA graph
// relies on). Runs on every device present.
#include <cmath>
#include <cstring>

#include "op_test_util.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/lora.h"
#include "optim/step_scalars.h"

namespace ftune::test {
namespace {

class MicroParamsTest : public OpTest {
 protected:
  // MicroParams in a device buffer; rewritten by set().
  struct OnDevice {
    DeviceTensor buf;
    const MicroParams* ptr() const { return static_cast<const MicroParams*>(buf.view().data); }
  };
  static std::vector<float> words(const MicroParams& m) {
    std::vector<float> w(sizeof(MicroParams) / sizeof(float));
    std::memcpy(w.data(), &m, sizeof(MicroParams));
    return w;
  }
  OnDevice place(const MicroParams& m) {
    const std::vector<float> w = words(m);
    return OnDevice{device_f32(w, {static_cast<int64_t>(w.size())}, device())};
  }
  void set(OnDevice& d, const MicroParams& m) {
    copy(d.buf.view(), tensor_from(words(m), d.buf.view().shape).view());
  }
};

MicroParams params(uint64_t row0, uint32_t offset, float grad_scale = 1.0f, double share = 1.0) {
  MicroParams m;
  m.row0 = row0;
  m.offset = offset;
  m.grad_scale = grad_scale;
  m.loss_share = share;
  return m;
}

TEST_P(MicroParamsTest, DropoutReadsRowAndOffsetFromMemory) {
  const int64_t B = 3, T = 5, C = 6, Tv = 9;
  const auto x = random_values(B * T * C, rng, 0.5f, 1.5f);
  auto in = device_f32(x, {B * T, C}, device());
  const float p = 0.35f;
  auto direct = [&](uint64_t row0, uint32_t offset) {
    auto out = poisoned({B * T, C}, device());
    dropout_forward(out.view(), in.view(), p, RngKey{77, 3, offset}, DropoutRows{row0, T, Tv});
    return to_vector(out.view());
  };
  OnDevice m = place(params(4, 12));
  auto read = [&] {
    auto out = poisoned({B * T, C}, device());
    // The values in the key and rows are stale on purpose: the memory wins.
    dropout_forward(out.view(), in.view(), p, RngKey{77, 3, 999, m.ptr()},
                    DropoutRows{123, T, Tv});
    return to_vector(out.view());
  };
  EXPECT_EQ(read(), direct(4, 12));
  set(m, params(1, 13));  // the next micro-batch, same launch arguments
  EXPECT_EQ(read(), direct(1, 13));
  EXPECT_NE(direct(1, 13), direct(4, 12));

  // Mixed storage (bf16 in, f32 out) goes through the other kernel.
  auto in16 = zeros({B * T, C}, device(), DType::BF16);
  cast(in16.view(), in.view());
  auto out_a = poisoned({B * T, C}, device()), out_b = poisoned({B * T, C}, device());
  dropout_backward(out_a.view(), in16.view(), p, RngKey{77, 3, 0, m.ptr()}, DropoutRows{0, T, Tv});
  dropout_backward(out_b.view(), in16.view(), p, RngKey{77, 3, 13}, DropoutRows{1, T, Tv});
  EXPECT_EQ(to_vector(out_a.view()), to_vector(out_b.view()));
}

TEST_P(MicroParamsTest, AttentionReadsRowAndOffsetFromMemory) {
  const int64_t B = 2, T = 6, H = 2, D = 4, C = H * D, Tv = 8;
  const auto qkv = random_values(B * T * 3 * C, rng, -2, 2);
  std::vector<int32_t> mask(B * T, 1);
  mask[T + 5] = mask[T + 4] = 0;
  auto dq = device_f32(qkv, {B, T, 3 * C}, device());
  auto dm = device_i32(mask, {B, T}, device());
  const auto g = random_values(B * T * C, rng);
  auto dout = device_f32(g, {B, T, C}, device());
  const float p = 0.4f;
  auto run = [&](RngKey key, uint64_t row0) {
    auto ws = zeros({std::max(attention_workspace(device(), B, H, T, D, true),
                              attention_workspace(T, D))},
                    device());
    auto out = poisoned({B, T, C}, device()), probs = poisoned({B, H, T, T}, device());
    attention_forward(out.view(), probs.view(), dq.view(), dm.view(), int(H), p, key, ws.view(),
                      DropoutRows{row0, T, Tv});
    auto dqkv = poisoned({B, T, 3 * C}, device());
    attention_backward(dqkv.view(), dout.view(), dq.view(), probs.view(), dm.view(), int(H), p,
                       key, ws.view(), DropoutRows{row0, T, Tv}, out.view());
    auto o = to_vector(out.view());
    const auto d = to_vector(dqkv.view());
    o.insert(o.end(), d.begin(), d.end());
    return o;
  };
  OnDevice m = place(params(3, 21));
  EXPECT_EQ(run(RngKey{5, 1, 0, m.ptr()}, 0), run(RngKey{5, 1, 21}, 3));
  set(m, params(0, 22));
  EXPECT_EQ(run(RngKey{5, 1, 7, m.ptr()}, 9), run(RngKey{5, 1, 22}, 0));
  EXPECT_NE(run(RngKey{5, 1, 22}, 0), run(RngKey{5, 1, 21}, 3));
}

TEST_P(MicroParamsTest, LoraInputDropoutReadsRowAndOffsetFromMemory) {
  const int64_t N = 6, C = 8, OC = 5, r = 2, T = 3;
  auto x = device_f32(random_values(N * C, rng), {N, C}, device());
  auto a = device_f32(random_values(r * C, rng), {r, C}, device());
  auto b = device_f32(random_values(OC * r, rng), {OC, r}, device());
  OnDevice m = place(params(2, 40));
  auto run = [&](RngKey key, uint64_t row0) {
    auto out = zeros({N, OC}, device()), u = zeros({N, r}, device());
    auto scratch = zeros({N, C}, device());
    lora_forward(out.view(), u.view(), x.view(), a.view(), b.view(), 0.5f,
                 LoraDropout{0.3f, key, scratch.view(), DropoutRows{row0, T, T}});
    return to_vector(out.view());
  };
  EXPECT_EQ(run(RngKey{8, 2, 0, m.ptr()}, 0), run(RngKey{8, 2, 40}, 2));
  EXPECT_NE(run(RngKey{8, 2, 40}, 2), run(RngKey{8, 2, 40}, 0));
}

TEST_P(MicroParamsTest, LossGradientScaleAndShareAreReadFromMemory) {
  const int64_t B = 4, K = 3;
  auto logits = device_f32(random_values(B * K, rng, -3, 3), {B, K}, device());
  auto labels = device_i32({0, 2, 1, 2}, {B}, device());
  auto loss = zeros({1}, device()), probs = zeros({B, K}, device());
  cross_entropy_forward(loss.view(), probs.view(), logits.view(), labels.view(), {});
  OnDevice m = place(params(0, 0, 0.375f, 0.25));
  auto direct = poisoned({B, K}, device()), read = poisoned({B, K}, device());
  cross_entropy_backward(direct.view(), probs.view(), labels.view(), {}, 0.375f);
  cross_entropy_backward(read.view(), probs.view(), labels.view(), {}, 1.0f,
                         &m.ptr()->grad_scale);
  EXPECT_EQ(to_vector(read.view()), to_vector(direct.view()));

  // The step loss: the share 0.25 from memory, the argument ignored.
  auto scalars = zeros({kStepScalarsBytes}, device(), DType::U8);
  step_scalars_begin(scalars.view());
  step_scalars_add_loss(scalars.view(), loss.view(), 9.0, &m.ptr()->loss_share);
  const double l = to_vector(loss.view())[0];
  EXPECT_EQ(read_step_scalars(scalars.view())[kStepLoss], 0.25 * l);
  // A NaN share (the trainer's injected divergence) arrives as NaN.
  set(m, params(0, 0, 1.0f, std::nan("")));
  step_scalars_add_loss(scalars.view(), loss.view(), 1.0, &m.ptr()->loss_share);
  EXPECT_TRUE(std::isnan(read_step_scalars(scalars.view())[kStepLoss]));
}

FTUNE_INSTANTIATE_DEVICES(MicroParamsTest);

}  // namespace
}  // namespace ftune::test
