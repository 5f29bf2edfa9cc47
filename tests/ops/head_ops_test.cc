// The classification-head ops: first-token selection, mean pooling and the tanh pooler.
#include <cmath>

#include "op_test_util.h"
#include "ops/first_token.h"
#include "ops/mean_pool.h"
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

TEST_P(HeadOpsTest, MeanPoolAveragesTheRealTokensPaddedOrPacked) {
  // Rows of 4, 2 and 3 real tokens, padded to T = 4 (row 1's padding in the middle of its run too).
  const int64_t B = 3, T = 4, C = 5;
  const std::vector<int32_t> mask = {1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 0};
  auto h = random_values(B * T * C, rng), g = random_values(B * C, rng);
  std::vector<float> want(B * C, 0.0f);
  std::vector<int> count(B, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (mask[b * T + t]) {
        ++count[b];
        for (int64_t c = 0; c < C; ++c) want[b * C + c] += h[(b * T + t) * C + c];
      }
  for (int64_t i = 0; i < B * C; ++i) want[i] /= static_cast<float>(count[i / C]);
  auto dh = device_f32(h, {B, T, C}, device()), dout = device_f32(g, {B, C}, device());
  auto dmask = device_i32(mask, {B * T}, device());
  auto out = poisoned({B, C}, device()), dhid = poisoned({B, T, C}, device());
  const MeanPoolRows padded{B, T, dmask.view(), {}};
  mean_pool_forward(out.view(), dh.view(), padded);
  const auto y = to_vector(out.view());
  for (int64_t i = 0; i < B * C; ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  mean_pool_backward(dhid.view(), dout.view(), padded);
  const auto gh = to_vector(dhid.view());
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(gh[n * C + c], mask[n] ? g[(n / T) * C + c] / count[n / T] : 0.0f) << n;

  // The same rows packed: their real tokens back to back give the same bits.
  std::vector<float> packed;
  std::vector<int32_t> cu = {0};
  for (int64_t n = 0; n < B * T; ++n) {
    if (mask[n]) packed.insert(packed.end(), h.begin() + n * C, h.begin() + (n + 1) * C);
    if (n % T == T - 1) cu.push_back(static_cast<int32_t>(packed.size() / C));
  }
  const int64_t N = cu.back();
  auto dp = device_f32(packed, {N, C}, device());
  auto dcu = device_i32(cu, {B + 1}, device());
  auto out2 = poisoned({B, C}, device()), dhid2 = poisoned({N, C}, device());
  const MeanPoolRows rows{B, 0, {}, dcu.view()};
  mean_pool_forward(out2.view(), dp.view(), rows);
  EXPECT_EQ(to_vector(out2.view()), y);
  mean_pool_backward(dhid2.view(), dout.view(), rows);
  const auto gp = to_vector(dhid2.view());
  for (int64_t n = 0, m = 0; n < B * T; ++n)
    if (mask[n]) {
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(gp[m * C + c], gh[n * C + c]);
      ++m;
    }
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
