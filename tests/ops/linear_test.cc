// Linear: forward against a double-precision reference, backward against finite differences,
// accumulation of parameter gradients, row-strided inputs.
#include "ops/linear.h"

#include <cmath>

#include "op_test_util.h"

namespace ftune::test {
namespace {

class LinearTest : public OpTest {};

std::vector<double> reference_linear(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<float>& b, int64_t N, int64_t C,
                                     int64_t OC) {
  std::vector<double> out(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = b[o];
      for (int64_t c = 0; c < C; ++c) s += double(x[n * C + c]) * w[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

TEST_P(LinearTest, ForwardMatchesReference) {
  const int64_t N = 9, C = 7, OC = 5;
  auto x = random_values(N * C, rng), w = random_values(OC * C, rng), b = random_values(OC, rng);
  auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {OC, C}, device()),
       db = device_f32(b, {OC}, device());
  auto out = poisoned({N, OC}, device());
  linear_forward(out.view(), dx.view(), dw.view(), db.view());
  const auto got = to_vector(out.view());
  const auto ref = reference_linear(x, w, b, N, C, OC);
  for (int64_t i = 0; i < N * OC; ++i) EXPECT_NEAR(got[i], ref[i], 1e-5) << i;
}

TEST_P(LinearTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t N = 6, C = 5, OC = 4;
  auto x = random_values(N * C, rng), w = random_values(OC * C, rng), b = random_values(OC, rng);
  const auto r = random_values(N * OC, rng);                                // dL/dout
  const auto w0 = random_values(OC * C, rng), b0 = random_values(OC, rng);  // existing grads
  auto loss = [&]() {
    auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {OC, C}, device()),
         db = device_f32(b, {OC}, device());
    auto out = poisoned({N, OC}, device());
    linear_forward(out.view(), dx.view(), dw.view(), db.view());
    return weighted_sum(to_vector(out.view()), r);
  };
  auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {OC, C}, device());
  auto dout = device_f32(r, {N, OC}, device());
  auto gx = poisoned({N, C}, device());
  auto gw = device_f32(w0, {OC, C}, device()), gb = device_f32(b0, {OC}, device());
  linear_backward(gx.view(), gw.view(), gb.view(), dout.view(), dx.view(), dw.view());
  auto gw_v = to_vector(gw.view()), gb_v = to_vector(gb.view());
  for (int64_t i = 0; i < OC * C; ++i) gw_v[i] -= w0[i];  // the op adds to what was there
  for (int64_t i = 0; i < OC; ++i) gb_v[i] -= b0[i];
  expect_gradient(loss, x.data(), N * C, to_vector(gx.view()), 1e-3, "dinp");
  expect_gradient(loss, w.data(), OC * C, gw_v, 1e-3, "dweight");
  expect_gradient(loss, b.data(), OC, gb_v, 1e-3, "dbias");

  // accumulate_dinp adds dout @ W to what dinp already holds.
  const auto before = to_vector(gx.view());
  linear_backward(gx.view(), TensorView(), TensorView(), dout.view(), dx.view(), dw.view(), true);
  const auto after = to_vector(gx.view());
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(after[i], 2 * before[i], 1e-5);
}

TEST_P(LinearTest, RowStridedInputReadsOnlyItsRows) {
  // inp = the first token of each of B sequences of length T: rows T*C apart.
  const int64_t B = 3, T = 4, C = 5, OC = 2;
  auto hidden = random_values(B * T * C, rng), w = random_values(OC * C, rng),
       b = random_values(OC, rng);
  auto dh = device_f32(hidden, {B, T, C}, device());
  auto dw = device_f32(w, {OC, C}, device()), db = device_f32(b, {OC}, device());
  TensorView first = dh.view().reshape(Shape{B, T * C});
  first.shape = Shape{B, C};  // rows of C elements, stride T*C
  auto out = poisoned({B, OC}, device());
  linear_forward(out.view(), first, dw.view(), db.view());
  std::vector<float> cls;
  for (int64_t bb = 0; bb < B; ++bb)
    cls.insert(cls.end(), hidden.begin() + bb * T * C, hidden.begin() + bb * T * C + C);
  const auto ref = reference_linear(cls, w, b, B, C, OC);
  const auto got = to_vector(out.view());
  for (int64_t i = 0; i < B * OC; ++i) EXPECT_NEAR(got[i], ref[i], 1e-5);
}

TEST_P(LinearTest, ParametersInsideAFlatBufferAndLargerShapes) {
  // Weights and biases are views into the flat parameter range, so on a GPU they are only 4-byte
  // aligned; shapes large enough for real GEMM kernels rather than tiny special cases.
  const int64_t N = 67, C = 96, OC = 80;
  auto x = random_values(N * C, rng), flat = random_values(1 + OC * C + OC, rng);
  const auto r = random_values(N * OC, rng);
  auto dflat = device_f32(flat, {1 + OC * C + OC}, device());
  const TensorView w = dflat.view().flat_range(1, OC * C).reshape(Shape{OC, C});
  const TensorView b = dflat.view().flat_range(1 + OC * C, OC);
  auto dx = device_f32(x, {N, C}, device()), dout = device_f32(r, {N, OC}, device());
  auto out = poisoned({N, OC}, device());
  linear_forward(out.view(), dx.view(), w, b);
  const std::vector<float> wv(flat.begin() + 1, flat.begin() + 1 + OC * C),
      bv(flat.begin() + 1 + OC * C, flat.end());
  const auto ref = reference_linear(x, wv, bv, N, C, OC);
  const auto got = to_vector(out.view());
  for (int64_t i = 0; i < N * OC; ++i) EXPECT_NEAR(got[i], ref[i], 1e-4) << i;

  auto gflat = zeros({1 + OC * C + OC}, device());
  auto gx = poisoned({N, C}, device());
  linear_backward(gx.view(), gflat.view().flat_range(1, OC * C).reshape(Shape{OC, C}),
                  gflat.view().flat_range(1 + OC * C, OC), dout.view(), dx.view(), w);
  const auto gxv = to_vector(gx.view()), gf = to_vector(gflat.view());
  double worst_x = 0, worst_w = 0, worst_b = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t o = 0; o < OC; ++o) s += double(r[n * OC + o]) * wv[o * C + c];
      worst_x = std::max(worst_x, std::fabs(s - gxv[n * C + c]));
    }
  for (int64_t o = 0; o < OC; ++o) {
    double sb = 0;
    for (int64_t n = 0; n < N; ++n) sb += r[n * OC + o];
    worst_b = std::max(worst_b, std::fabs(sb - gf[1 + OC * C + o]));
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += double(r[n * OC + o]) * x[n * C + c];
      worst_w = std::max(worst_w, std::fabs(s - gf[1 + o * C + c]));
    }
  }
  EXPECT_EQ(gf[0], 0.0f);  // the element before the parameters is not touched
  EXPECT_LT(worst_x, 1e-4);
  EXPECT_LT(worst_w, 1e-4);
  EXPECT_LT(worst_b, 1e-4);
}

TEST_P(LinearTest, RejectsMismatchedShapes) {
  auto x = zeros({3, 4}, device()), w = zeros({5, 3}, device()), b = zeros({5}, device()),
       out = zeros({3, 5}, device());
  EXPECT_THROW(linear_forward(out.view(), x.view(), w.view(), b.view()), ShapeError);
}

FTUNE_INSTANTIATE_DEVICES(LinearTest);

}  // namespace
}  // namespace ftune::test
