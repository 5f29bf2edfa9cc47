// Layer norm: forward vs reference, backward vs finite differences, fused add+norm vs composed, the
// 16-bit output copy vs a separate cast, no bias vs a zero bias.
#include "ops/layer_norm.h"

#include <cmath>

#include "core/memory.h"
#include "core/thread_pool.h"
#include "op_test_util.h"
#include "ops/cast.h"
#include "ops/residual.h"

namespace ftune::test {
namespace {

class LayerNormTest : public OpTest {};

constexpr float kEps = 1e-5f;

TEST_P(LayerNormTest, ForwardMatchesReference) {
  const int64_t N = 5, C = 33;
  auto x = random_values(N * C, rng, -3, 3), w = random_values(C, rng), b = random_values(C, rng);
  auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {C}, device()),
       db = device_f32(b, {C}, device());
  auto out = poisoned({N, C}, device()), mean = poisoned({N}, device()),
       rstd = poisoned({N}, device());
  layer_norm_forward(out.view(), mean.view(), rstd.view(), dx.view(), dw.view(), db.view(), kEps);
  const auto got = to_vector(out.view());
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(got[n * C + c], (x[n * C + c] - m) / std::sqrt(v + kEps) * w[c] + b[c], 2e-5);
    EXPECT_NEAR(to_vector(mean.view())[n], m, 1e-5);
    EXPECT_NEAR(to_vector(rstd.view())[n], 1 / std::sqrt(v + kEps), 1e-4);
  }
}

TEST_P(LayerNormTest, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 17;
  auto x = random_values(N * C, rng, -2, 2), w = random_values(C, rng), b = random_values(C, rng);
  const auto r = random_values(N * C, rng);
  auto forward = [&](DeviceTensor& out, DeviceTensor& mean, DeviceTensor& rstd) {
    auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {C}, device()),
         db = device_f32(b, {C}, device());
    layer_norm_forward(out.view(), mean.view(), rstd.view(), dx.view(), dw.view(), db.view(), kEps);
  };
  auto loss = [&]() {
    auto out = poisoned({N, C}, device()), mean = poisoned({N}, device()),
         rstd = poisoned({N}, device());
    forward(out, mean, rstd);
    return weighted_sum(to_vector(out.view()), r);
  };
  auto out = poisoned({N, C}, device()), mean = poisoned({N}, device()),
       rstd = poisoned({N}, device());
  forward(out, mean, rstd);
  auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {C}, device());
  auto dout = device_f32(r, {N, C}, device());
  auto gx = poisoned({N, C}, device()), gw = zeros({C}, device()), gb = zeros({C}, device());
  layer_norm_backward(gx.view(), gw.view(), gb.view(), dout.view(), dx.view(), dw.view(),
                      mean.view(), rstd.view());
  expect_gradient(loss, x.data(), N * C, to_vector(gx.view()), 2e-3, "dinp");
  expect_gradient(loss, w.data(), C, to_vector(gw.view()), 2e-3, "dweight");
  expect_gradient(loss, b.data(), C, to_vector(gb.view()), 2e-3, "dbias");
}

TEST_P(LayerNormTest, FusedAddNormEqualsResidualThenNorm) {
  const int64_t N = 6, C = 40;
  auto a = random_values(N * C, rng), b = random_values(N * C, rng);
  auto w = random_values(C, rng), bias = random_values(C, rng);
  auto da = device_f32(a, {N, C}, device()), db = device_f32(b, {N, C}, device());
  auto dw = device_f32(w, {C}, device()), dbias = device_f32(bias, {C}, device());
  auto sum = poisoned({N, C}, device()), out1 = poisoned({N, C}, device());
  auto m1 = poisoned({N}, device()), r1 = poisoned({N}, device());
  add_layer_norm_forward(out1.view(), sum.view(), m1.view(), r1.view(), da.view(), db.view(),
                         dw.view(), dbias.view(), kEps);
  auto sum2 = poisoned({N, C}, device()), out2 = poisoned({N, C}, device());
  auto m2 = poisoned({N}, device()), r2 = poisoned({N}, device());
  residual_forward(sum2.view(), da.view(), db.view());
  layer_norm_forward(out2.view(), m2.view(), r2.view(), sum2.view(), dw.view(), dbias.view(), kEps);
  EXPECT_EQ(to_vector(sum.view()), to_vector(sum2.view()));
  EXPECT_EQ(to_vector(out1.view()), to_vector(out2.view()));
  EXPECT_EQ(to_vector(r1.view()), to_vector(r2.view()));
}

TEST_P(LayerNormTest, WithoutBiasEqualsAZeroBias) {
  // ModernBERT's norm_bias false: an undefined bias, and dweight without dbias in backward. C 384
  // takes the CUDA kernel's vectorised path, 33 its element path.
  for (const int64_t C : {int64_t{33}, int64_t{384}}) {
    const int64_t N = 5;
    auto x = random_values(N * C, rng, -3, 3), w = random_values(C, rng), r = random_values(N * C, rng);
    auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {C}, device());
    auto dout = device_f32(r, {N, C}, device());
    auto zero = zeros({C}, device());
    auto out0 = poisoned({N, C}, device()), out1 = poisoned({N, C}, device());
    auto m0 = poisoned({N}, device()), r0 = poisoned({N}, device());
    auto m1 = poisoned({N}, device()), r1 = poisoned({N}, device());
    layer_norm_forward(out0.view(), m0.view(), r0.view(), dx.view(), dw.view(), zero.view(), kEps);
    layer_norm_forward(out1.view(), m1.view(), r1.view(), dx.view(), dw.view(), TensorView(), kEps);
    EXPECT_EQ(to_vector(out1.view()), to_vector(out0.view())) << C;
    auto g0 = poisoned({N, C}, device()), g1 = poisoned({N, C}, device());
    auto gw0 = zeros({C}, device()), gw1 = zeros({C}, device()), gb0 = zeros({C}, device());
    layer_norm_backward(g0.view(), gw0.view(), gb0.view(), dout.view(), dx.view(), dw.view(),
                        m0.view(), r0.view());
    layer_norm_backward(g1.view(), gw1.view(), TensorView(), dout.view(), dx.view(), dw.view(),
                        m1.view(), r1.view());
    EXPECT_EQ(to_vector(g1.view()), to_vector(g0.view())) << C;
    EXPECT_EQ(to_vector(gw1.view()), to_vector(gw0.view())) << C;
  }
}

// Raw bytes of a view on any device.
std::string bytes_of(TensorView v) {
  HostTensor h(v.dtype, v.shape);
  copy(h.view(), v);
  return std::string(static_cast<const char*>(h.view().data), h.view().nbytes());
}

TEST_P(LayerNormTest, SixteenBitCopyEqualsACastOfTheOutput) {
  for (const int64_t C : {int64_t{33}, int64_t{384}}) {
    const int64_t N = 7;
    auto x = random_values(N * C, rng, -3, 3), w = random_values(C, rng),
         b = random_values(C, rng);
    auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {C}, device()),
         db = device_f32(b, {C}, device());
    for (DType t : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " C " + std::to_string(C));
      auto out = poisoned({N, C}, device()), mean = poisoned({N}, device()),
           rstd = poisoned({N}, device());
      DeviceTensor out_h(device(), t, {N, C}), cast_h(device(), t, {N, C});
      fill_zero(out_h.view());
      layer_norm_forward(out.view(), mean.view(), rstd.view(), dx.view(), dw.view(), db.view(),
                         kEps, out_h.view());
      auto out2 = poisoned({N, C}, device()), m2 = poisoned({N}, device()),
           r2 = poisoned({N}, device());
      layer_norm_forward(out2.view(), m2.view(), r2.view(), dx.view(), dw.view(), db.view(), kEps);
      EXPECT_EQ(bytes_of(out.view()), bytes_of(out2.view()));  // the copy changes nothing else
      EXPECT_EQ(bytes_of(rstd.view()), bytes_of(r2.view()));
      cast(cast_h.view(), out2.view());
      EXPECT_EQ(bytes_of(out_h.view()), bytes_of(cast_h.view()));
    }
  }
  auto x = zeros({2, 8}, device()), w = zeros({8}, device()), b = zeros({8}, device());
  auto out = zeros({2, 8}, device()), mean = zeros({2}, device()), rstd = zeros({2}, device());
  DeviceTensor wrong_shape(device(), DType::BF16, {2, 9});
  EXPECT_THROW(layer_norm_forward(out.view(), mean.view(), rstd.view(), x.view(), w.view(),
                                  b.view(), kEps, wrong_shape.view()),
               ShapeError);
  EXPECT_THROW(layer_norm_forward(out.view(), mean.view(), rstd.view(), x.view(), w.view(),
                                  b.view(), kEps, out.view()),  // f32 is not a 16-bit copy
               ShapeError);
}

TEST_P(LayerNormTest, ParameterGradientsDoNotDependOnThreadCount) {
  // The weight and bias gradients are sums over rows: they must come out in the same bits for
  // every thread count (more rows than one reduction chunk, columns not a multiple of 32, and
  // gradients that already hold a value: they accumulate).
  const int64_t N = 301, C = 40;
  auto x = random_values(N * C, rng, -2, 2), w = random_values(C, rng), b = random_values(C, rng);
  const auto r = random_values(N * C, rng), gw0 = random_values(C, rng),
             gb0 = random_values(C, rng);
  std::vector<std::vector<float>> dinp, dweight, dbias;
  for (int threads : {1, 2, 3, 4}) {
    set_compute_threads(threads);
    auto dx = device_f32(x, {N, C}, device()), dw = device_f32(w, {C}, device()),
         db = device_f32(b, {C}, device());
    auto out = poisoned({N, C}, device()), mean = poisoned({N}, device()),
         rstd = poisoned({N}, device());
    layer_norm_forward(out.view(), mean.view(), rstd.view(), dx.view(), dw.view(), db.view(), kEps);
    auto dout = device_f32(r, {N, C}, device());
    auto gx = poisoned({N, C}, device()), gw = device_f32(gw0, {C}, device()),
         gb = device_f32(gb0, {C}, device());
    layer_norm_backward(gx.view(), gw.view(), gb.view(), dout.view(), dx.view(), dw.view(),
                        mean.view(), rstd.view());
    dinp.push_back(to_vector(gx.view()));
    dweight.push_back(to_vector(gw.view()));
    dbias.push_back(to_vector(gb.view()));
    EXPECT_EQ(dinp.back(), dinp.front()) << threads << " threads";
    EXPECT_EQ(dweight.back(), dweight.front()) << threads << " threads";
    EXPECT_EQ(dbias.back(), dbias.front()) << threads << " threads";
  }
  set_compute_threads(0);
  // And they are the sums they should be.
  for (int64_t c = 0; c < C; ++c) {
    double sw = gw0[c], sb = gb0[c];
    for (int64_t n = 0; n < N; ++n) {
      double m = 0, v = 0;
      for (int64_t k = 0; k < C; ++k) m += x[n * C + k];
      m /= C;
      for (int64_t k = 0; k < C; ++k) v += (x[n * C + k] - m) * (x[n * C + k] - m);
      v /= C;
      sw += r[n * C + c] * (x[n * C + c] - m) / std::sqrt(v + kEps);
      sb += r[n * C + c];
    }
    EXPECT_NEAR(dweight.front()[c], sw, 2e-4 * N) << c;
    EXPECT_NEAR(dbias.front()[c], sb, 2e-5 * N) << c;
  }
}

FTUNE_INSTANTIATE_DEVICES(LayerNormTest);

}  // namespace
}  // namespace ftune::test
