// The optimizer step and gradient clipping on every device present: AdamW over several parameter
// segments (decay on some, an LR multiplier on one, a gradient scale) against a plain host
// reference of adamw.h's equations, and the gradient norm / clipping against a double-precision
// host sum, including run-to-run determinism of the norm. The device-side step (step_scalars.h):
// loss accumulation, norm, clip factor and AdamW reading them from the device give the same bits
// as the host-driven step they replace; a non-finite step leaves weights and moments untouched bit
// for bit and is counted; the abort latch stops every later update; the bf16 / f16 shadow copy
// holds the updated weights rounded to nearest even, also when it covers only a sub-range of the
// parameters that cuts segments (elements outside it untouched, the weights the same bits).
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "core/arena.h"
#include "models/param_table.h"
#include "ops/op_test_util.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/step_scalars.h"

namespace ftune::test {
namespace {

class OptimizerTest : public OpTest {};

TEST_P(OptimizerTest, AdamWStepsMatchTheReferenceOnEverySegment) {
  ParamTable table;
  table.add("encoder.dense.weight", Shape{7, 9});
  table.add("encoder.dense.bias", Shape{7});
  table.add("encoder.LayerNorm.weight", Shape{33});
  table.add("classifier.weight", Shape{3, 50});
  const int64_t n = table.total();
  AdamWOptions options;
  options.lr = 1e-2f;
  options.weight_decay = 0.1f;
  AdamW adam(table, options);
  ArenaPlan plan;
  plan.add_flat("param/values", DType::F32, n);
  plan.add_flat("grad/values", DType::F32, n);
  adam.add_to_plan(plan);
  Arena arena(device(), plan);
  adam.bind(arena);
  adam.set_lr_scale("classifier.weight", 0.5f);

  std::vector<float> p = random_values(n, rng), m(n, 0.0f), v(n, 0.0f);
  copy(arena.view("param/values"), tensor_from(p, Shape{n}).view());
  const float lrs[] = {1e-2f, 8e-3f, 5e-3f}, scales[] = {1.0f, 0.7f, 1.0f};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_values(n, rng);
    copy(arena.view("grad/values"), tensor_from(g, Shape{n}).view());
    adam.step(arena.view("param/values"), arena.view("grad/values"), lrs[t - 1], scales[t - 1]);
    const double bc1 = 1.0 - std::pow(double(options.beta1), t);
    const double bc2 = 1.0 - std::pow(double(options.beta2), t);
    for (const ParamSpec& s : table.specs()) {
      const float lr = lrs[t - 1] * (s.name == "classifier.weight" ? 0.5f : 1.0f);
      const float wd = s.decay ? options.weight_decay : 0.0f;
      const float step_size = static_cast<float>(double(lr) / bc1);
      const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
      for (int64_t i = s.offset; i < s.offset + s.shape.numel(); ++i) {
        const float gi = g[i] * scales[t - 1];
        if (wd != 0.0f) p[i] *= 1.0f - lr * wd;
        m[i] += (gi - m[i]) * (1.0f - options.beta1);
        v[i] = v[i] * options.beta2 + (1.0f - options.beta2) * gi * gi;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + options.eps);
      }
    }
  }
  const auto got_p = to_vector(arena.view("param/values"));
  const auto got_m = to_vector(adam.exp_avg()), got_v = to_vector(adam.exp_avg_sq());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got_p[i], p[i], 1e-6 * std::max(1.0f, std::fabs(p[i]))) << i;
    EXPECT_NEAR(got_m[i], m[i], 1e-6) << i;
    EXPECT_NEAR(got_v[i], v[i], 1e-7) << i;
  }
  EXPECT_EQ(adam.steps_taken(), 3);
}

TEST_P(OptimizerTest, GradNormIsExactAndDeterministicAndClippingScales) {
  const int64_t n = 100003;  // several blocks' worth and not a multiple of anything
  const auto x = random_values(n, rng, -0.05f, 0.05f);
  double ref = 0;
  for (float e : x) ref += double(e) * double(e);
  auto dx = device_f32(x, {n}, device());
  const double s1 = grad_sum_of_squares(dx.view()), s2 = grad_sum_of_squares(dx.view());
  EXPECT_NEAR(s1, ref, 1e-12 * ref);
  EXPECT_EQ(s1, s2);  // same bits on a second run

  const double norm = clip_grad_norm(dx.view(), 1.0);  // the norm is ~9: clipped to 1
  EXPECT_NEAR(norm, std::sqrt(ref), 1e-12 * std::sqrt(ref));
  const float coef = clip_coefficient(norm, 1.0);
  ASSERT_LT(coef, 1.0f);
  const auto clipped = to_vector(dx.view());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(clipped[i], x[i] * coef) << i;
  EXPECT_NEAR(std::sqrt(grad_sum_of_squares(dx.view())), 1.0, 1e-5);
}

// A small AdamW over a planned arena with parameters, gradients and the step scalars.
struct AdamSetup {
  ParamTable table;
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<Arena> arena;
  int64_t n = 0;
  TensorView values() const { return arena->view("param/values"); }
  TensorView grads() const { return arena->view("grad/values"); }
  TensorView scalars() const { return adam->step_scalars(); }
};

std::unique_ptr<AdamSetup> make_adam(Device device) {
  auto a = std::make_unique<AdamSetup>();
  a->table.add("encoder.dense.weight", Shape{37, 41});
  a->table.add("encoder.dense.bias", Shape{37});
  a->table.add("classifier.weight", Shape{3, 50});
  a->n = a->table.total();
  AdamWOptions options;
  options.lr = 1e-2f;
  options.weight_decay = 0.1f;
  a->adam = std::make_unique<AdamW>(a->table, options);
  ArenaPlan plan;
  plan.add_flat("param/values", DType::F32, a->n);
  plan.add_flat("grad/values", DType::F32, a->n);
  plan.add_flat("shadow/bf16", DType::BF16, a->n);
  plan.add_flat("shadow/f16", DType::F16, a->n);
  a->adam->add_to_plan(plan);
  a->arena = std::make_unique<Arena>(device, plan);
  a->adam->bind(*a->arena);
  return a;
}

// The raw bytes of a view on any device.
std::string raw_bytes(TensorView v) {
  HostTensor h(v.dtype, v.shape);
  copy(h.view(), v);
  return std::string(static_cast<const char*>(h.view().data), h.view().nbytes());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(OptimizerTest, DeviceSideStepGivesTheHostDrivenStepsBits) {
  // Two identical optimizers: one driven as the trainer used to (loss and norm read to the host,
  // the clip factor handed to step()), one through the step scalars.
  auto host = make_adam(device()), dev = make_adam(device());
  const auto p0 = random_values(host->n, rng);
  copy(host->values(), tensor_from(p0, Shape{host->n}).view());
  copy(dev->values(), tensor_from(p0, Shape{dev->n}).view());
  const double max_norm = 1.0;
  for (int t = 1; t <= 3; ++t) {
    // Gradients large enough that clipping applies (norm ~ 25).
    const auto g = random_values(host->n, rng, -1.0f, 1.0f);
    copy(host->grads(), tensor_from(g, Shape{host->n}).view());
    copy(dev->grads(), tensor_from(g, Shape{dev->n}).view());
    const float losses[] = {0.693f, 0.71f}, shares[] = {0.625f, 0.375f};
    double host_loss = 0;
    step_scalars_begin(dev->scalars());
    for (int k = 0; k < 2; ++k) {
      auto loss = device_f32({losses[k] * t}, {1}, device());
      host_loss += double(shares[k]) * double(to_host_scalar(loss.view()));
      step_scalars_add_loss(dev->scalars(), loss.view(), double(shares[k]));
    }
    const double norm = std::sqrt(grad_sum_of_squares(host->grads()));
    host->adam->step(host->values(), host->grads(), 1e-2f, clip_coefficient(norm, max_norm));
    step_scalars_finish(dev->scalars(), dev->grads(), max_norm, 3);
    dev->adam->apply(dev->values(), dev->grads(), 1e-2f);
    const StepScalarValues v = read_step_scalars(dev->scalars());
    EXPECT_EQ(v[kLastStepLoss], host_loss);
    EXPECT_EQ(v[kGradNorm], norm);
    EXPECT_EQ(static_cast<float>(v[kClipCoef]), clip_coefficient(norm, max_norm));
    EXPECT_LT(v[kClipCoef], 1.0);
    EXPECT_EQ(v[kStepOk], 1.0);
    EXPECT_EQ(v[kAdamSteps], double(t));
    EXPECT_EQ(v[kStepsFinished], double(t));
    EXPECT_EQ(v[kSkippedSteps], 0.0);
  }
  EXPECT_TRUE(same_bits(to_vector(host->values()), to_vector(dev->values())));
  EXPECT_TRUE(same_bits(to_vector(host->adam->exp_avg()), to_vector(dev->adam->exp_avg())));
  EXPECT_TRUE(same_bits(to_vector(host->adam->exp_avg_sq()), to_vector(dev->adam->exp_avg_sq())));
  EXPECT_EQ(dev->adam->steps_taken(), 3);
  EXPECT_EQ(host->adam->steps_taken(), 3);
}

TEST_P(OptimizerTest, NonFiniteStepTouchesNothingAndIsCounted) {
  auto a = make_adam(device());
  copy(a->values(), tensor_from(random_values(a->n, rng), Shape{a->n}).view());
  auto finite_loss = device_f32({0.5f}, {1}, device());
  auto nan_loss = device_f32({std::nanf("")}, {1}, device());
  auto step = [&](TensorView loss, bool nan_grad) {
    auto g = random_values(a->n, rng);
    if (nan_grad) g[17] = INFINITY;
    copy(a->grads(), tensor_from(g, Shape{a->n}).view());
    step_scalars_begin(a->scalars());
    step_scalars_add_loss(a->scalars(), loss, 1.0);
    step_scalars_finish(a->scalars(), a->grads(), 1.0, 3);
    a->adam->apply(a->values(), a->grads(), 1e-2f, a->arena->view("shadow/bf16"));
  };
  step(finite_loss.view(), false);
  const auto p = to_vector(a->values()), m = to_vector(a->adam->exp_avg()),
             v = to_vector(a->adam->exp_avg_sq());
  const std::string shadow = raw_bytes(a->arena->view("shadow/bf16"));
  step(nan_loss.view(), false);  // non-finite loss
  step(finite_loss.view(), true);  // non-finite gradient norm
  EXPECT_TRUE(same_bits(to_vector(a->values()), p));
  EXPECT_TRUE(same_bits(to_vector(a->adam->exp_avg()), m));
  EXPECT_TRUE(same_bits(to_vector(a->adam->exp_avg_sq()), v));
  EXPECT_EQ(raw_bytes(a->arena->view("shadow/bf16")), shadow);
  StepScalarValues s = read_step_scalars(a->scalars());
  EXPECT_EQ(s[kStepOk], 0.0);
  EXPECT_EQ(s[kSkippedSteps], 2.0);
  EXPECT_EQ(s[kNonfiniteInRow], 2.0);
  EXPECT_EQ(s[kAdamSteps], 1.0);  // t advances only on applied steps
  EXPECT_EQ(s[kAbortStep], 0.0);
  EXPECT_TRUE(std::isnan(s[kWindowLoss]));  // the window's mean shows the NaN, as before
  step(finite_loss.view(), false);  // applied: t 2, the run of non-finite steps ends
  s = read_step_scalars(a->scalars());
  EXPECT_EQ(s[kStepOk], 1.0);
  EXPECT_EQ(s[kAdamSteps], 2.0);
  EXPECT_EQ(s[kNonfiniteInRow], 0.0);
  EXPECT_EQ(s[kSkippedSteps], 2.0);
  EXPECT_FALSE(same_bits(to_vector(a->values()), p));
}

TEST_P(OptimizerTest, AbortLatchStopsEveryLaterUpdate) {
  auto a = make_adam(device());
  copy(a->values(), tensor_from(random_values(a->n, rng), Shape{a->n}).view());
  auto finite_loss = device_f32({0.5f}, {1}, device());
  auto nan_loss = device_f32({std::nanf("")}, {1}, device());
  const int64_t max_nonfinite = 2;
  auto step = [&](TensorView loss) {
    copy(a->grads(), tensor_from(random_values(a->n, rng), Shape{a->n}).view());
    step_scalars_begin(a->scalars());
    step_scalars_add_loss(a->scalars(), loss, 1.0);
    step_scalars_finish(a->scalars(), a->grads(), 1.0, max_nonfinite);
    a->adam->apply(a->values(), a->grads(), 1e-2f);
  };
  step(finite_loss.view());
  step(nan_loss.view());
  const auto p = to_vector(a->values()), m = to_vector(a->adam->exp_avg());
  step(nan_loss.view());  // the second in a row: the limit, latched at step 3
  step(finite_loss.view());  // finite, but the run is aborting: not applied
  step(finite_loss.view());
  const StepScalarValues s = read_step_scalars(a->scalars());
  EXPECT_EQ(s[kAbortStep], 3.0);
  EXPECT_EQ(s[kSkippedSteps], 2.0);
  EXPECT_EQ(s[kAdamSteps], 1.0);
  EXPECT_EQ(s[kStepsFinished], 5.0);
  EXPECT_TRUE(same_bits(to_vector(a->values()), p));
  EXPECT_TRUE(same_bits(to_vector(a->adam->exp_avg()), m));
}

TEST_P(OptimizerTest, ShadowCopyHoldsTheRoundedUpdatedWeights) {
  auto a = make_adam(device());
  copy(a->values(), tensor_from(random_values(a->n, rng), Shape{a->n}).view());
  for (const char* name : {"shadow/bf16", "shadow/f16"}) {
    SCOPED_TRACE(name);
    const TensorView shadow = a->arena->view(name);
    fill_zero(shadow);
    copy(a->grads(), tensor_from(random_values(a->n, rng), Shape{a->n}).view());
    a->adam->step(a->values(), a->grads(), 1e-2f);  // without a shadow: untouched
    HostTensor zero(shadow.dtype, shadow.shape);
    copy(zero.view(), shadow);
    for (int64_t i = 0; i < a->n; ++i)
      ASSERT_EQ(shadow.dtype == DType::BF16 ? zero.data<bf16_t>()[i].bits
                                            : zero.data<f16_t>()[i].bits,
                0)
          << i;
    a->adam->step(a->values(), a->grads(), 1e-2f);
    step_scalars_apply_unconditionally(a->scalars(), 1.0f);
    a->adam->apply(a->values(), a->grads(), 1e-2f, shadow);
    const auto p = to_vector(a->values());
    HostTensor got(shadow.dtype, shadow.shape);
    copy(got.view(), shadow);
    for (int64_t i = 0; i < a->n; ++i) {
      if (shadow.dtype == DType::BF16)
        ASSERT_EQ(got.data<bf16_t>()[i].bits, float_to_bf16(p[i]).bits) << i;
      else
        ASSERT_EQ(got.data<f16_t>()[i].bits, float_to_f16(p[i]).bits) << i;
    }
  }
  EXPECT_THROW(a->adam->apply(a->values(), a->grads(), 1e-2f, a->grads()), ShapeError);
}

TEST_P(OptimizerTest, ShadowOfASubRangeCutsSegmentsAndLeavesTheRestAlone) {
  auto a = make_adam(device()), ref = make_adam(device());
  const auto p0 = random_values(a->n, rng);
  copy(a->values(), tensor_from(p0, Shape{a->n}).view());
  copy(ref->values(), tensor_from(p0, Shape{ref->n}).view());
  // From inside the first segment (37 x 41) to inside the last (3 x 50): cut at both ends.
  const int64_t begin = 1000, count = a->n - begin - 77;
  for (const char* name : {"shadow/bf16", "shadow/f16"}) {
    SCOPED_TRACE(name);
    const TensorView whole = a->arena->view(name);
    HostTensor fill(whole.dtype, whole.shape);
    std::memset(fill.view().data, 0xA5, fill.view().nbytes());
    copy(whole, fill.view());
    const std::string poison = raw_bytes(whole);
    const auto g = random_values(a->n, rng);
    copy(a->grads(), tensor_from(g, Shape{a->n}).view());
    copy(ref->grads(), tensor_from(g, Shape{ref->n}).view());
    // The shadow view starts at element 5 of the buffer: its offset in the buffer is not the
    // parameters' offset.
    const TensorView shadow = whole.flat_range(5, count);
    step_scalars_apply_unconditionally(a->scalars(), 0.8f);
    a->adam->apply(a->values(), a->grads(), 1e-2f, shadow, begin);
    ref->adam->step(ref->values(), ref->grads(), 1e-2f, 0.8f);
    const auto p = to_vector(a->values());
    EXPECT_TRUE(same_bits(p, to_vector(ref->values())));  // the shadow changes no weight
    EXPECT_TRUE(same_bits(to_vector(a->adam->exp_avg()), to_vector(ref->adam->exp_avg())));
    const std::string got = raw_bytes(whole);
    const size_t es = dtype_size(whole.dtype);
    for (int64_t i = 0; i < whole.numel(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, got.data() + i * es, es);
      if (i < 5 || i >= 5 + count) {
        ASSERT_EQ(got.substr(i * es, es), poison.substr(i * es, es)) << "outside, element " << i;
        continue;
      }
      const float w = p[begin + i - 5];
      ASSERT_EQ(bits, whole.dtype == DType::BF16 ? float_to_bf16(w).bits : float_to_f16(w).bits)
          << i;
    }
  }
  const TensorView bf = a->arena->view("shadow/bf16");
  // A shadow reaching past the parameters, or a negative offset, is refused.
  EXPECT_THROW(a->adam->apply(a->values(), a->grads(), 1e-2f, bf.flat_range(0, 100), a->n - 99),
               ShapeError);
  EXPECT_THROW(a->adam->apply(a->values(), a->grads(), 1e-2f, bf.flat_range(0, 100), -1),
               ShapeError);
}

// apply_scheduled (the learning rate read from the step scalars, what a CUDA graph of the
// optimizer step replays) gives apply()'s bits, with LR scales and the shadow, over steps whose
// rates differ; a stale rate on the device would show.
TEST_P(OptimizerTest, ScheduledRateFromTheDeviceGivesTheBitsOfThePassedRate) {
  auto a = make_adam(device()), ref = make_adam(device());
  for (auto* x : {&a, &ref}) (*x)->adam->set_lr_scale("classifier.weight", 0.37f);
  const auto p0 = random_values(a->n, rng);
  copy(a->values(), tensor_from(p0, Shape{a->n}).view());
  copy(ref->values(), tensor_from(p0, Shape{ref->n}).view());
  const TensorView sa = a->arena->view("shadow/bf16"), sr = ref->arena->view("shadow/bf16");
  for (const float lr : {3e-3f, 7.77e-4f, 1.1e-2f}) {
    const auto g = random_values(a->n, rng);
    copy(a->grads(), tensor_from(g, Shape{a->n}).view());
    copy(ref->grads(), tensor_from(g, Shape{ref->n}).view());
    step_scalars_apply_unconditionally(a->scalars(), 0.9f);
    step_scalars_apply_unconditionally(ref->scalars(), 0.9f);
    a->adam->set_learning_rate(lr);
    a->adam->apply_scheduled(a->values(), a->grads(), sa.flat_range(0, 500), 100);
    ref->adam->apply(ref->values(), ref->grads(), lr, sr.flat_range(0, 500), 100);
    EXPECT_TRUE(same_bits(to_vector(a->values()), to_vector(ref->values()))) << lr;
    EXPECT_TRUE(same_bits(to_vector(a->adam->exp_avg()), to_vector(ref->adam->exp_avg())));
    EXPECT_TRUE(raw_bytes(sa.flat_range(0, 500)) == raw_bytes(sr.flat_range(0, 500)));
  }
  // The device's rate is what counts: a wrong one gives other weights.
  a->adam->set_learning_rate(5e-3f);
  step_scalars_apply_unconditionally(a->scalars(), 1.0f);
  step_scalars_apply_unconditionally(ref->scalars(), 1.0f);
  a->adam->apply_scheduled(a->values(), a->grads());
  ref->adam->apply(ref->values(), ref->grads(), 6e-3f);
  EXPECT_FALSE(same_bits(to_vector(a->values()), to_vector(ref->values())));
}

FTUNE_INSTANTIATE_DEVICES(OptimizerTest);

}  // namespace
}  // namespace ftune::test
