// Embedding: lookup, accumulation of several tables, sparse gradient with repeated ids,
// untouched rows left alone, out-of-range ids rejected.
#include "ops/embedding.h"

#include "op_test_util.h"

namespace ftune::test {
namespace {

class EmbeddingTest : public OpTest {};

TEST_P(EmbeddingTest, LooksUpAndAccumulates) {
  const int64_t V = 11, C = 6, N = 5;
  auto table = random_values(V * C, rng), other = random_values(3 * C, rng);
  const std::vector<int32_t> ids{3, 0, 10, 3, 7}, ids2{0, 2, 1, 1, 0};
  auto dt = device_f32(table, {V, C}, device()), dt2 = device_f32(other, {3, C}, device());
  auto di = device_i32(ids, {N}, device()), di2 = device_i32(ids2, {N}, device());
  auto out = poisoned({N, C}, device());
  embedding_forward(out.view(), di.view(), dt.view(), false);
  embedding_forward(out.view(), di2.view(), dt2.view(), true);
  const auto y = to_vector(out.view());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(y[n * C + c], table[ids[n] * C + c] + other[ids2[n] * C + c]);
}

TEST_P(EmbeddingTest, SparseGradientAddsRowsOfRepeatedIds) {
  const int64_t V = 8, C = 4, N = 6;
  const std::vector<int32_t> ids{2, 5, 2, 2, 0, 5};
  auto g = random_values(N * C, rng), init = random_values(V * C, rng);
  auto dg = device_f32(g, {N, C}, device()), di = device_i32(ids, {N}, device());
  auto dtable = device_f32(init, {V, C}, device());
  embedding_backward(dtable.view(), dg.view(), di.view());
  const auto got = to_vector(dtable.view());
  std::vector<double> expect(init.begin(), init.end());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) expect[ids[n] * C + c] += g[n * C + c];
  for (int64_t i = 0; i < V * C; ++i) EXPECT_NEAR(got[i], expect[i], 1e-6) << i;
  for (int64_t row : {1, 3, 4, 6, 7})  // rows that never occur keep their bits
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(got[row * C + c], init[row * C + c]);
}

TEST_P(EmbeddingTest, PaddingRowGetsNoGradient) {
  const int64_t V = 5, C = 3, N = 4;
  const std::vector<int32_t> ids{1, 0, 1, 4};
  auto g = random_values(N * C, rng);
  auto dg = device_f32(g, {N, C}, device()), di = device_i32(ids, {N}, device());
  auto dtable = zeros({V, C}, device());
  embedding_backward(dtable.view(), dg.view(), di.view(), /*padding_idx=*/1);
  const auto got = to_vector(dtable.view());
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(got[1 * C + c], 0.0f);
    EXPECT_EQ(got[0 * C + c], g[1 * C + c]);
    EXPECT_EQ(got[4 * C + c], g[3 * C + c]);
  }
}

TEST_P(EmbeddingTest, BackwardGivesTheCpuBitsForManyRepeatedIds) {
  // Hundreds of tokens over a small vocabulary (every id repeated many times), a row width that
  // is not a multiple of 32, a padding id: the sum per row must follow the CPU's token order.
  const int64_t V = 23, C = 70, N = 517;
  std::vector<int32_t> ids(N);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  for (int32_t& id : ids) id = pick(rng);
  auto g = random_values(N * C, rng), init = random_values(V * C, rng);
  auto expect = device_f32(init, {V, C}, Device::cpu());
  embedding_backward(expect.view(), device_f32(g, {N, C}, Device::cpu()).view(),
                     device_i32(ids, {N}, Device::cpu()).view(), /*padding_idx=*/4);
  auto dg = device_f32(g, {N, C}, device()), di = device_i32(ids, {N}, device());
  auto dtable = device_f32(init, {V, C}, device());
  embedding_backward(dtable.view(), dg.view(), di.view(), /*padding_idx=*/4);
  EXPECT_EQ(to_vector(dtable.view()), to_vector(expect.view()));
}

TEST(EmbeddingErrors, OutOfRangeIdIsAnInputError) {
  auto table = zeros({4, 2}, Device::cpu());
  auto ids = device_i32({1, 4}, {2}, Device::cpu());
  auto out = zeros({2, 2}, Device::cpu());
  try {
    embedding_forward(out.view(), ids.view(), table.view(), false);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 4"), std::string::npos) << e.what();
  }
}

FTUNE_INSTANTIATE_DEVICES(EmbeddingTest);

}  // namespace
}  // namespace ftune::test
