// The fused CUDA disentangled attention, emulated on the CPU: ops/disentangled_fused.h's sequence
// and ops/disentangled_tiles.h's blocks, run with a host backend that executes each block's
// phases thread by thread (kThreads "threads", the kernel's loop and reduction order), against the
// CPU reference (ops/disentangled_attention_cpu.cc, itself proven against transformers): sequences
// that are not a multiple of the tiles, longer than the bucket window, several heads, padded rows,
// c2p / p2c alone and together, plain clamped distances, head sizes that pick every tile size,
// strided q/k/v (the fused projection's columns) and dropout. The GPU runs the same code through
// tests/ops/disentangled_attention_test.cc.
#include "ops/disentangled_emulation.h"

namespace ftune::test {
namespace {

using disentangled::FusedKind;

TEST(DisentangledFusedEmulation, MatchesTheCpuReference) {
  std::mt19937_64 rng(test_seed());
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, rng);
    const Grads want = reference(in), got = emulated(in);
    expect_close(got.out, want.out, 2e-6, "out");
    expect_close(got.dq, want.dq, 1e-5, "dq");
    expect_close(got.dk, want.dk, 1e-5, "dk");
    expect_close(got.dv, want.dv, 1e-5, "dv");
    if (c.c2p) expect_close(got.dpk, want.dpk, 1e-5, "dpk");
    if (c.p2c) expect_close(got.dpq, want.dpq, 1e-5, "dpq");
  }
}

// The tile sizes the head sizes above select, so the cases cover each.
TEST(DisentangledFusedEmulation, TileSizesFitSharedMemory) {
  using disentangled::fused_tile;
  EXPECT_EQ(fused_tile(FusedKind::Forward, 8), 32);
  EXPECT_EQ(fused_tile(FusedKind::Forward, 64), 32);
  EXPECT_EQ(fused_tile(FusedKind::Dq, 64), 32);
  EXPECT_EQ(fused_tile(FusedKind::Dkv, 64), 16);
  EXPECT_EQ(fused_tile(FusedKind::Forward, 300), 8);
  EXPECT_EQ(fused_tile(FusedKind::Dkv, 300), 4);
  EXPECT_EQ(fused_tile(FusedKind::Dkv, 600), 0);
  for (FusedKind k : {FusedKind::Forward, FusedKind::Dq, FusedKind::Dkv})
    for (int64_t D : {8, 64, 128, 300, 480})
      EXPECT_LE(disentangled::fused_shared_floats(k, fused_tile(k, D), fused_tile(k, D), D),
                disentangled::kMaxSharedFloats);
}

// What the fused path keeps (DeBERTa-v3-base, 8 x 512 tokens): saved is the rows' statistics and
// O, an eighth of the probabilities (B, H, T, T) the CPU saves; the workspace holds the position
// products and their gradients, (H, B T, W) each with W < 2 x 256 buckets, and delta.
TEST(DisentangledFusedEmulation, SavesStatisticsNotProbabilities) {
  DisentangledSpec s;
  s.heads = 12, s.head_dim = 64, s.c2p = s.p2c = true, s.position_buckets = 256,
  s.max_relative_positions = 512;
  const int64_t B = 8, T = 512;
  const auto L = disentangled::fused_layout(s, B, T, deberta_relative_index(s, -(T - 1)),
                                            deberta_relative_index(s, T - 1) + 1, true);
  EXPECT_EQ(L.saved, B * 12 * T + B * T * 768);
  EXPECT_LE(L.W, 2 * 256);
  EXPECT_EQ(L.workspace, 4 * 12 * B * T * L.Wp + B * 12 * T);
  const DisentangledBuffers cuda_bufs =
      disentangled_attention_buffers(s, Device::cuda(0), B, T, true);
  EXPECT_EQ(cuda_bufs.saved, L.saved);
  EXPECT_LT(cuda_bufs.saved * 7, B * 12 * T * T);
}

}  // namespace
}  // namespace ftune::test
