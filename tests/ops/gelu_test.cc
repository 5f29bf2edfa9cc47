// GELU (erf and tanh forms): values vs the formulas in double, derivative vs finite differences,
// HF activation-name mapping.
#include "ops/gelu.h"

#include <cmath>

#include "op_test_util.h"

namespace ftune::test {
namespace {

class GeluTest : public OpTest {};

double gelu_ref(double x, GeluForm form) {
  if (form == GeluForm::Erf) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST_P(GeluTest, BothFormsMatchTheirFormulasAndDerivatives) {
  for (GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
    const int64_t n = 301;
    auto x = random_values(n, rng, -6, 6);
    x[0] = 0.0f;
    auto dx = device_f32(x, {n}, device());
    auto out = poisoned({n}, device());
    gelu_forward(out.view(), dx.view(), form);
    const auto got = to_vector(out.view());
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(got[i], gelu_ref(x[i], form), 2e-6 * (1 + std::fabs(x[i])));

    const auto r = random_values(n, rng);
    auto dout = device_f32(r, {n}, device());
    auto gx = poisoned({n}, device());
    gelu_backward(gx.view(), dx.view(), dout.view(), form);
    auto loss = [&]() {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += gelu_ref(x[i], form) * r[i];
      return s;
    };
    expect_gradient(loss, x.data(), n, to_vector(gx.view()), 1e-4, "gelu", 1e-3f);
  }
}

TEST(GeluNames, MapsHuggingFaceActivations) {
  EXPECT_EQ(gelu_form_from_hf("gelu", "k"), GeluForm::Erf);
  EXPECT_EQ(gelu_form_from_hf("gelu_new", "k"), GeluForm::Tanh);
  EXPECT_EQ(gelu_form_from_hf("gelu_pytorch_tanh", "k"), GeluForm::Tanh);
  try {
    gelu_form_from_hf("swiglu", "config.json: hidden_act");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: hidden_act"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("swiglu"), std::string::npos);
  }
}

FTUNE_INSTANTIATE_DEVICES(GeluTest);

}  // namespace
}  // namespace ftune::test
