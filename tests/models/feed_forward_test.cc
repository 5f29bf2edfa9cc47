// The feed-forward layer block (models/layers/feed_forward.h) on the CPU against the same ops
// composed by hand: GELU (BERT's, DeBERTa's) and gated (ModernBERT's GeGLU, with dropout on the
// activation's output), forward and backward, dx written or accumulated, and the trained base's
// weight gradients. The ops themselves are checked against references in tests/ops; this checks
// the block's wiring (order, buffers, dropout, accumulation) bit for bit.
#include <gtest/gtest.h>

#include <random>

#include "models/layers/feed_forward.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/op_test_util.h"

// A named namespace: the test files of a group compile as one unit (tests/CMakeLists.txt).
namespace ftune::test::feed_forward_block {

constexpr int64_t N = 6, C = 4, F = 5;

HostTensor zeros_like(const HostTensor& t) {
  return tensor_from(std::vector<float>(t.view().numel(), 0.0f), t.view().shape);
}

void run(bool gated, bool accumulate) {
  SCOPED_TRACE(::testing::Message() << "gated " << gated << " accumulate " << accumulate);
  std::mt19937_64 rng(gated * 2 + accumulate + 1);
  const int64_t P = gated ? 2 * F : F;  // in's outputs
  HostTensor x = random_tensor({N, C}, rng), w1 = random_tensor({P, C}, rng),
             b1 = random_tensor({P}, rng), w2 = random_tensor({C, F}, rng),
             b2 = random_tensor({C}, rng), dy0 = random_tensor({N, C}, rng);
  const FeedForwardActivation act = gated ? FeedForwardActivation::Gated(GluAct::GeluErf)
                                          : FeedForwardActivation::Gelu(GeluForm::Tanh);
  const FeedForwardDropout drop{gated ? 0.3f : 0.0f, RngKey{5, 7, 1}, {}};
  // Gradients of both linears (zeros) for the block and for the hand-composed ops.
  HostTensor gw1 = zeros_like(w1), gb1 = zeros_like(b1), gw2 = zeros_like(w2), gb2 = zeros_like(b2);
  HostTensor rw1 = zeros_like(w1), rb1 = zeros_like(b1), rw2 = zeros_like(w2), rb2 = zeros_like(b2);
  const FeedForward block(
      AdaptedLinear(LinearParams{w1.view(), b1.view(), w1.view(), b1.view(), gw1.view(), gb1.view()}),
      AdaptedLinear(LinearParams{w2.view(), b2.view(), w2.view(), b2.view(), gw2.view(), gb2.view()}),
      act, drop);

  HostTensor y = poisoned_tensor({N, C}), h = poisoned_tensor({N, F}), pre = poisoned_tensor({N, P});
  block.forward(y.view(), h.view(), pre.view(), x.view(), x.view());
  HostTensor ry = poisoned_tensor({N, C}), rh = poisoned_tensor({N, F}), rpre = poisoned_tensor({N, P});
  linear_forward(rpre.view(), x.view(), w1.view(), b1.view());
  if (gated) glu_forward(rh.view(), rpre.view(), act.glu);
  else gelu_forward(rh.view(), rpre.view(), act.gelu);
  if (drop.p > 0) dropout_forward(rh.view(), rh.view(), drop.p, drop.rng, drop.rows);
  linear_forward(ry.view(), rh.view(), w2.view(), b2.view());
  EXPECT_EQ(to_vector(y.view()), to_vector(ry.view()));
  EXPECT_EQ(to_vector(h.view()), to_vector(rh.view()));

  const std::vector<float> dx0(N * C, 0.5f);
  HostTensor dy = tensor_from(to_vector(dy0.view()), {N, C}), dh = poisoned_tensor({N, F}),
             dpre = poisoned_tensor({N, P}), dx = tensor_from(dx0, {N, C});
  block.backward(dy.view(), h.view(), dh.view(), pre.view(), dpre.view(), x.view(), x.view(),
                 dx.view(), accumulate);
  HostTensor rdh = poisoned_tensor({N, F}), rdpre = poisoned_tensor({N, P}),
             rdx = tensor_from(dx0, {N, C});
  linear_backward(rdh.view(), rw2.view(), rb2.view(), dy0.view(), rh.view(), w2.view());
  if (drop.p > 0) dropout_backward(rdh.view(), rdh.view(), drop.p, drop.rng, drop.rows);
  if (gated) glu_backward(rdpre.view(), rpre.view(), rdh.view(), act.glu);
  else gelu_backward(rdpre.view(), rpre.view(), rdh.view(), act.gelu);
  linear_backward(rdx.view(), rw1.view(), rb1.view(), rdpre.view(), x.view(), w1.view(), accumulate);
  EXPECT_EQ(to_vector(dx.view()), to_vector(rdx.view()));
  EXPECT_EQ(to_vector(gw1.view()), to_vector(rw1.view()));
  EXPECT_EQ(to_vector(gb1.view()), to_vector(rb1.view()));
  EXPECT_EQ(to_vector(gw2.view()), to_vector(rw2.view()));
  EXPECT_EQ(to_vector(gb2.view()), to_vector(rb2.view()));
  EXPECT_NE(to_vector(gw1.view()), std::vector<float>(P * C, 0.0f));  // it did train
}

TEST(FeedForwardBlock, GeluMatchesItsOpsComposedByHand) {
  run(false, false);
  run(false, true);
}

TEST(FeedForwardBlock, GatedWithDropoutMatchesItsOpsComposedByHand) {
  run(true, false);
  run(true, true);
}

}  // namespace ftune::test::feed_forward_block
