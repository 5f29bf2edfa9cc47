// The classification-head ops: first-token selection and the tanh pooler.
#include <cmath>

#include "op_test_util.h"
#include "ops/first_token.h"
#include "ops/tanh_pooler.h"

namespace ftune::test {
namespace {

class HeadOpsTest : public OpTest {};

TEST_P(HeadOpsTest, FirstTokenSelectsAndScattersWithZeros) {
  const int64_t B = 3, T = 4, C = 5;
  auto h = random_values(B * T * C, rng), g = random_values(B * C, rng);
  auto dh = device_f32(h, {B, T, C}, device());
  auto out = poisoned({B, C}, device());
  first_token_forward(out.view(), dh.view());
  const auto y = to_vector(out.view());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(y[b * C + c], h[b * T * C + c]);
  auto dout = device_f32(g, {B, C}, device());
  auto dhid = poisoned({B, T, C}, device());
  first_token_backward(dhid.view(), dout.view());
  const auto gh = to_vector(dhid.view());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(gh[(b * T + t) * C + c], t == 0 ? g[b * C + c] : 0.0f);
}

// Packed rows (lengths 3, 1, 4 back to back): row b's first token is token cu[b], read from the
// device's cu_seqlens; backward overwrites every token (0 except the first of each row).
TEST_P(HeadOpsTest, FirstTokenOfPackedRowsReadsCuSeqlensOnTheDevice) {
  const std::vector<int32_t> cu = {0, 3, 4, 8};
  const int64_t B = 3, N = 8, C = 5;
  auto h = random_values(N * C, rng), g = random_values(B * C, rng);
  auto dh = device_f32(h, {N, C}, device());
  auto dcu = device_i32(cu, {B + 1}, device());
  auto out = poisoned({B, C}, device());
  first_token_forward(out.view(), dh.view(), dcu.view());
  const auto y = to_vector(out.view());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(y[b * C + c], h[cu[b] * C + c]) << b << " " << c;
  auto dout = device_f32(g, {B, C}, device());
  auto dhid = poisoned({N, C}, device());
  first_token_backward(dhid.view(), dout.view(), dcu.view());
  const auto gh = to_vector(dhid.view());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = cu[b]; t < cu[b + 1]; ++t)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(gh[t * C + c], t == cu[b] ? g[b * C + c] : 0.0f) << t << " " << c;
  // cu_seqlens must hold B + 1 row starts.
  auto short_cu = device_i32({0, 3, 4}, {B}, device());
  EXPECT_THROW(first_token_forward(out.view(), dh.view(), short_cu.view()), ShapeError);
}

TEST_P(HeadOpsTest, TanhPoolerForwardAndBackward) {
  const int64_t B = 4, C = 6;
  auto x = random_values(B * C, rng), w = random_values(C * C, rng), b = random_values(C, rng);
  const auto r = random_values(B * C, rng);
  auto loss = [&]() {
    auto dx = device_f32(x, {B, C}, device()), dw = device_f32(w, {C, C}, device()),
         db = device_f32(b, {C}, device());
    auto out = poisoned({B, C}, device());
    tanh_pooler_forward(out.view(), dx.view(), dw.view(), db.view());
    return weighted_sum(to_vector(out.view()), r);
  };
  auto dx = device_f32(x, {B, C}, device()), dw = device_f32(w, {C, C}, device()),
       db = device_f32(b, {C}, device());
  auto out = poisoned({B, C}, device());
  tanh_pooler_forward(out.view(), dx.view(), dw.view(), db.view());
  const auto y = to_vector(out.view());
  for (int64_t i = 0; i < B; ++i)
    for (int64_t o = 0; o < C; ++o) {
      double s = b[o];
      for (int64_t c = 0; c < C; ++c) s += double(x[i * C + c]) * w[o * C + c];
      EXPECT_NEAR(y[i * C + o], std::tanh(s), 1e-6);
    }
  auto dout = device_f32(r, {B, C}, device());
  auto gx = poisoned({B, C}, device()), gw = zeros({C, C}, device()), gb = zeros({C}, device());
  auto scratch = poisoned({B, C}, device());
  tanh_pooler_backward(gx.view(), gw.view(), gb.view(), dout.view(), dx.view(), out.view(),
                       dw.view(), scratch.view());
  expect_gradient(loss, x.data(), B * C, to_vector(gx.view()), 1e-3, "dinp");
  expect_gradient(loss, w.data(), C * C, to_vector(gw.view()), 1e-3, "dweight");
  expect_gradient(loss, b.data(), C, to_vector(gb.view()), 1e-3, "dbias");
}

FTUNE_INSTANTIATE_DEVICES(HeadOpsTest);

}  // namespace
}  // namespace ftune::test
