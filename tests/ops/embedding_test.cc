// Embedding: lookup, accumulation of several tables, sparse gradient with repeated ids,
// untouched rows left alone, out-of-range ids rejected; the backward's order of additions
// (ops/embedding.h: sorted by id, pieces per window of 64) reproduced by a plain reference bit for
// bit on every device, at BERT-base shapes too (token types all 0, positions repeated per row); a
// bf16 / f16 table (a frozen one stored in 16 bits) gives the f32 op's bits on its values in f32,
// and has no gradient.
#include "ops/embedding.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/cast.h"
#include "op_test_util.h"

namespace ftune::test {
namespace {

class EmbeddingTest : public OpTest {
 protected:
  // dtable += the gradient of ids, through the op with its planned workspace.
  void backward(DeviceTensor& dtable, const std::vector<float>& g, const std::vector<int32_t>& ids,
                int64_t C, int64_t padding_idx = -1) {
    const int64_t N = static_cast<int64_t>(ids.size());
    auto dg = device_f32(g, {N, C}, device()), di = device_i32(ids, {N}, device());
    auto ws = zeros({std::max<int64_t>(1, embedding_backward_workspace(device(), N, C))}, device());
    embedding_backward(dtable.view(), dg.view(), di.view(), padding_idx, ws.view());
  }
};

// The order of additions of ops/embedding.h, written out plainly: stable sort by id, windows of
// 64 sorted entries, each id's pieces summed from 0 in token order, added to the row in window
// order.
std::vector<float> reference_backward(std::vector<float> table, const std::vector<float>& g,
                                      const std::vector<int32_t>& ids, int64_t C,
                                      int64_t padding_idx) {
  const int64_t N = static_cast<int64_t>(ids.size());
  std::vector<int64_t> order(N);
  for (int64_t n = 0; n < N; ++n) order[n] = n;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  for (int64_t w0 = 0; w0 < N; w0 += kEmbeddingWindow) {
    const int64_t w1 = std::min(N, w0 + kEmbeddingWindow);
    for (int64_t p = w0; p < w1;) {
      const int32_t id = ids[order[p]];
      int64_t q = p;
      while (q < w1 && ids[order[q]] == id) ++q;
      if (id != padding_idx)
        for (int64_t c = 0; c < C; ++c) {
          float piece = 0.0f;
          for (int64_t e = p; e < q; ++e) piece += g[order[e] * C + c];
          table[id * C + c] += piece;
        }
      p = q;
    }
  }
  return table;
}

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
  auto dtable = device_f32(init, {V, C}, device());
  backward(dtable, g, ids, C);
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
  auto dtable = zeros({V, C}, device());
  backward(dtable, g, ids, C, /*padding_idx=*/1);
  const auto got = to_vector(dtable.view());
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(got[1 * C + c], 0.0f);
    EXPECT_EQ(got[0 * C + c], g[1 * C + c]);
    EXPECT_EQ(got[4 * C + c], g[3 * C + c]);
  }
}

TEST_P(EmbeddingTest, BackwardFollowsTheFixedOrderForManyRepeatedIds) {
  // Hundreds of tokens over a small vocabulary (every id repeated many times, most ids spanning
  // several windows), a row width that is not a multiple of 32, a padding id: every device gives
  // the reference's bits.
  const int64_t V = 23, C = 70, N = 517;
  std::vector<int32_t> ids(N);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  for (int32_t& id : ids) id = pick(rng);
  auto g = random_values(N * C, rng), init = random_values(V * C, rng);
  auto dtable = device_f32(init, {V, C}, device());
  backward(dtable, g, ids, C, /*padding_idx=*/4);
  EXPECT_EQ(to_vector(dtable.view()), reference_backward(init, g, ids, C, 4));
}

TEST_P(EmbeddingTest, BackwardAtBertShapesGivesTheReferenceBitsForEveryTable) {
  // A BERT-base micro-batch of 16 x 128 tokens (2,048: 32 windows): token types all 0 (one id
  // spanning every window), positions 0..127 per row (each id in 16 windows), words from a
  // Zipf-like draw over 30,522 with [CLS] / [SEP] / padding repeated.
  const int64_t B = 16, T = 128, N = B * T, C = 768;
  std::vector<int32_t> types(N, 0), positions(N), words(N);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t n = 0; n < N; ++n) {
    positions[n] = static_cast<int32_t>(n % T);
    const int64_t t = n % T;
    words[n] = t == 0 ? 101 : t == T - 1 ? 102 : t > 100 ? 0
                                                        : static_cast<int32_t>(1000 + 29000 *
                                                                              std::pow(u(rng), 3));
  }
  const auto g = random_values(N * C, rng, -1e-2f, 1e-2f);
  struct Table {
    const char* name;
    const std::vector<int32_t>* ids;
    int64_t V, padding;
  };
  for (const Table& t : {Table{"token types", &types, 2, -1},
                         Table{"positions", &positions, 512, -1},
                         Table{"words", &words, 30522, 0}}) {
    SCOPED_TRACE(t.name);
    const auto init = random_values(t.V * C, rng, -1e-3f, 1e-3f);
    auto dtable = device_f32(init, {t.V, C}, device());
    backward(dtable, g, *t.ids, C, t.padding);
    EXPECT_EQ(to_vector(dtable.view()), reference_backward(init, g, *t.ids, C, t.padding));
  }
}

TEST_P(EmbeddingTest, BackwardIsTheSameOnEveryRunAndThreadCount) {
  const int64_t V = 5, C = 40, N = 700;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>((n * 7) % V == 3 ? 3 : n % 2);
  const auto g = random_values(N * C, rng), init = random_values(V * C, rng);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    auto dtable = device_f32(init, {V, C}, device());
    backward(dtable, g, ids, C);
    if (first.empty()) first = to_vector(dtable.view());
    EXPECT_EQ(to_vector(dtable.view()), first) << threads << " threads";
  }
  set_compute_threads(0);
}

// A frozen table stored in 16 bits: the same bits as the f32 op on the table rounded to 16 bits and
// widened back (a lookup, and an accumulation onto another table's rows), on the vector path (C a
// multiple of 4, at a Gemma-3-1B width) and the scalar one (odd C). Its gradient is refused.
TEST_P(EmbeddingTest, SixteenBitTableGivesTheF32OpsBitsOnItsValues) {
  for (DType dtype : {DType::BF16, DType::F16})
    for (const auto [V, C] : {std::pair<int64_t, int64_t>{300, 1152}, {37, 13}}) {
      const std::string what = fmt::format("{} C={}", dtype_name(dtype), C);
      const int64_t N = 150;
      std::vector<int32_t> ids(N), ids2(N);
      for (int64_t n = 0; n < N; ++n) {
        ids[n] = static_cast<int32_t>(rng() % V);
        ids2[n] = static_cast<int32_t>(rng() % 3);
      }
      auto t32 = device_f32(random_values(V * C, rng, -3, 3), {V, C}, device());
      auto t16 = zeros({V, C}, device(), dtype);
      cast(t16.view(), t32.view());
      auto rounded = zeros({V, C}, device());
      cast(rounded.view(), t16.view());  // the 16-bit values, exactly, in f32
      auto other = device_f32(random_values(3 * C, rng), {3, C}, device());
      auto di = device_i32(ids, {N}, device()), di2 = device_i32(ids2, {N}, device());
      auto want = poisoned({N, C}, device()), got = poisoned({N, C}, device());
      embedding_forward(want.view(), di.view(), rounded.view(), false);
      embedding_forward(got.view(), di.view(), t16.view(), false);
      EXPECT_EQ(to_vector(got.view()), to_vector(want.view())) << what;
      embedding_forward(want.view(), di2.view(), other.view(), false);
      embedding_forward(got.view(), di2.view(), other.view(), false);
      embedding_forward(want.view(), di.view(), rounded.view(), true);
      embedding_forward(got.view(), di.view(), t16.view(), true);
      EXPECT_EQ(to_vector(got.view()), to_vector(want.view())) << what << " accumulated";
      // The output stays f32; a 16-bit table has no gradient.
      auto out16 = zeros({N, C}, device(), dtype);
      EXPECT_THROW(embedding_forward(out16.view(), di.view(), t16.view(), false), ShapeError);
      auto ws = zeros({std::max<int64_t>(1, embedding_backward_workspace(device(), N, C))}, device());
      EXPECT_THROW(embedding_backward(t16.view(), want.view(), di.view(), -1, ws.view()), ShapeError);
    }
}

TEST(EmbeddingErrors, ASmallWorkspaceIsAShapeError) {
  auto table = zeros({4, 2}, Device::cpu()), dout = zeros({3, 2}, Device::cpu());
  auto ids = device_i32({1, 2, 3}, {3}, Device::cpu());
  auto ws = zeros({embedding_backward_workspace(Device::cpu(), 3, 2) - 1}, Device::cpu());
  EXPECT_THROW(embedding_backward(table.view(), dout.view(), ids.view(), -1, ws.view()),
               ShapeError);
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
