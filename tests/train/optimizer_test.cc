// The optimizer step and gradient clipping on every device present: AdamW over several parameter
// segments (decay on some, an LR multiplier on one, a gradient scale) against a plain host
// reference of adamw.h's equations, and the gradient norm / clipping against a double-precision
// host sum, including run-to-run determinism of the norm.
#include <cmath>

#include "core/arena.h"
#include "models/param_table.h"
#include "ops/op_test_util.h"
#include "train/adamw.h"
#include "train/grad_clip.h"

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

FTUNE_INSTANTIATE_DEVICES(OptimizerTest);

}  // namespace
}  // namespace ftune::test
