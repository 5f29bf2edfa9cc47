// Residual add: forward sum and the backward's two identical gradients.
#include "ops/residual.h"

#include "op_test_util.h"

namespace ftune::test {
namespace {

class ResidualTest : public OpTest {};

TEST_P(ResidualTest, AddsAndPassesGradientToBothInputs) {
  const int64_t n = 1027;  // odd length: the vectorised CUDA path has a tail
  auto a = random_values(n, rng), b = random_values(n, rng), g = random_values(n, rng);
  auto da = device_f32(a, {n}, device()), db = device_f32(b, {n}, device());
  auto out = poisoned({n}, device());
  residual_forward(out.view(), da.view(), db.view());
  const auto y = to_vector(out.view());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  auto dout = device_f32(g, {n}, device());
  auto ga = poisoned({n}, device()), gb = poisoned({n}, device());
  residual_backward(ga.view(), gb.view(), dout.view());
  EXPECT_EQ(to_vector(ga.view()), g);
  EXPECT_EQ(to_vector(gb.view()), g);
}

FTUNE_INSTANTIATE_DEVICES(ResidualTest);

}  // namespace
}  // namespace ftune::test
