// The fused CUDA disentangled attention, emulated on the CPU: ops/disentangled_fused.h's sequence
// and ops/disentangled_tiles.h's blocks, run with a host backend that executes each block's
// phases thread by thread (kThreads "threads", the kernel's loop and reduction order), against the
// CPU reference (ops/disentangled_attention_cpu.cc, itself proven against transformers): sequences
// that are not a multiple of the tiles, longer than the bucket window, several heads, padded rows,
// c2p / p2c alone and together, plain clamped distances, head sizes that pick every tile size,
// strided q/k/v (the fused projection's columns) and dropout. The GPU runs the same code through
// tests/ops/disentangled_attention_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/disentangled_fused.h"
#include "ops/op_test_util.h"
#include "ops/primitives_cpu.h"

namespace ftune::test {
namespace {

using disentangled::FusedKind;
using disentangled::FusedPtrs;

struct HostExec {
  static constexpr int kNT = disentangled::kThreads;
  template <class F>
  void phase(F&& f) {
    for (int t = 0; t < kNT; ++t) f(t);
  }
};

// The CUDA backend's twin: the same GEMMs on OpenBLAS, the grid's blocks one after another.
struct HostBackend {
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void zero_rows(float* p, int64_t ld, int64_t cols, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) std::fill(p + r * ld, p + r * ld + cols, 0.0f);
  }
  void blocks(FusedKind kind, const DisentangledArgs& a, const FusedPtrs& t0, int64_t tile,
              int64_t bh, int64_t tiles) {
    ++launches;
    std::vector<float> sm(disentangled::fused_shared_floats(kind, tile, tile, a.spec.head_dim));
    FusedPtrs t = t0;
    resolve_micro(t.rng, t.row0);
    for (int64_t x = 0; x < bh; ++x)
      for (int64_t y = 0; y < tiles; ++y) {
        std::fill(sm.begin(), sm.end(), std::nanf(""));  // nothing carries over between blocks
        HostExec ex;
        if (kind == FusedKind::Forward)
          disentangled::forward_block(ex, a, t, tile, tile, y, x, sm.data());
        else if (kind == FusedKind::Dq)
          disentangled::dq_block(ex, a, t, tile, tile, y, x, sm.data());
        else
          disentangled::dkv_block(ex, a, t, tile, tile, y, x, sm.data());
      }
  }
  int launches = 0;
};

struct Case {
  const char* name;
  int64_t heads, head_dim, buckets, max_rel, B, T;
  bool c2p, p2c;
  int64_t pad;   // padding tokens at the end of the last row
  float p;       // dropout
  int64_t ldm;   // q, k, v row stride in units of C (3: columns of a fused projection)
};

struct Inputs {
  DisentangledArgs a;
  std::vector<int32_t> index, mask;
  std::vector<float> q, k, v, pk, pq, dout;
};

Inputs make_inputs(const Case& c, std::mt19937_64& rng) {
  Inputs in;
  DisentangledArgs& a = in.a;
  a.spec.heads = c.heads;
  a.spec.head_dim = c.head_dim;
  a.spec.c2p = c.c2p;
  a.spec.p2c = c.p2c;
  a.spec.position_buckets = c.buckets;
  a.spec.max_relative_positions = c.max_rel;
  a.scale = a.spec.scale();
  a.B = c.B;
  a.T = c.T;
  const int64_t C = c.heads * c.head_dim, N = c.B * c.T, R = 2 * a.spec.span();
  for (int64_t d = 0; d < 2 * c.T - 1; ++d)
    in.index.push_back(static_cast<int32_t>(deberta_relative_index(a.spec, d - (c.T - 1))));
  a.rel_index = in.index.data();
  a.rlo = deberta_relative_index(a.spec, -(c.T - 1));
  a.rhi = deberta_relative_index(a.spec, c.T - 1) + 1;
  in.mask.assign(N, 1);
  for (int64_t t = c.T - c.pad; t < c.T; ++t) in.mask[(c.B - 1) * c.T + t] = 0;
  a.key_mask = in.mask.data();
  a.ldq = a.ldk = a.ldv = c.ldm * C;
  a.ldo = a.lddq = a.lddk = a.lddv = C;
  a.ldpk = a.ldpq = a.lddpk = a.lddpq = C;
  a.dropout_p = c.p;
  a.rng = RngKey{91, 4, 2};
  a.row0 = 3;
  a.Tv = c.T + 5;
  in.q = random_values(N * a.ldq, rng);
  in.k = random_values(N * a.ldk, rng);
  in.v = random_values(N * a.ldv, rng);
  in.pk = random_values(R * C, rng);
  in.pq = random_values(R * C, rng);
  in.dout = random_values(N * C, rng);
  return in;
}

struct Grads {
  std::vector<float> out, dq, dk, dv, dpk, dpq;
};

Grads reference(const Inputs& in) {
  const DisentangledArgs& a = in.a;
  const int64_t C = a.spec.heads * a.spec.head_dim, N = a.B * a.T, R = 2 * a.spec.span();
  Grads g{std::vector<float>(N * C), std::vector<float>(N * C), std::vector<float>(N * C),
          std::vector<float>(N * C), std::vector<float>(R * C), std::vector<float>(R * C)};
  std::vector<float> probs(a.B * a.spec.heads * a.T * a.T);
  std::vector<float> ws(compute_threads() * cpu::disentangled_workspace_per_thread(a));
  cpu::disentangled_attention_forward(a, g.out.data(), probs.data(), in.q.data(), in.k.data(),
                                      in.v.data(), in.pk.data(), in.pq.data(), ws.data());
  cpu::disentangled_attention_backward(a, g.dq.data(), g.dk.data(), g.dv.data(), g.dpk.data(),
                                       g.dpq.data(), in.dout.data(), in.q.data(), in.k.data(),
                                       in.v.data(), in.pk.data(), in.pq.data(), probs.data(),
                                       ws.data());
  return g;
}

Grads emulated(const Inputs& in, int* launches = nullptr) {
  const DisentangledArgs& a = in.a;
  const int64_t C = a.spec.heads * a.spec.head_dim, N = a.B * a.T, R = 2 * a.spec.span();
  const float nan = std::nanf("");
  Grads g{std::vector<float>(N * C, nan), std::vector<float>(N * C, nan),
          std::vector<float>(N * C, nan), std::vector<float>(N * C, nan),
          std::vector<float>(R * C, nan), std::vector<float>(R * C, nan)};
  const auto L = disentangled::fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, true);
  std::vector<float> saved(L.saved, nan), ws(L.workspace, nan);
  HostBackend be;
  disentangled::fused_forward(be, a, g.out.data(), saved.data(), in.q.data(), in.k.data(),
                              in.v.data(), in.pk.data(), in.pq.data(), ws.data());
  std::fill(ws.begin(), ws.end(), nan);  // backward must not rely on forward's scratch
  disentangled::fused_backward(be, a, g.dq.data(), g.dk.data(), g.dv.data(), g.dpk.data(),
                               g.dpq.data(), in.dout.data(), in.q.data(), in.k.data(),
                               in.v.data(), in.pk.data(), in.pq.data(), saved.data(), ws.data());
  if (launches) *launches = be.launches;
  return g;
}

const Case kCases[] = {
    // name, H, D, buckets, max_rel, B, T, c2p, p2c, pad, p, ldm
    {"v3_like_both_terms_padded", 3, 8, 8, 16, 2, 37, true, true, 10, 0.0f, 1},
    {"c2p_only_dropout", 2, 8, 8, 16, 2, 45, true, false, 7, 0.2f, 1},
    {"p2c_only_strided", 2, 8, 6, 20, 2, 33, false, true, 3, 0.0f, 3},
    {"plain_clamped_distances", 2, 4, 0, 6, 3, 19, true, true, 5, 0.1f, 3},
    {"head_64_tiles_32_and_16", 2, 64, 16, 64, 1, 70, true, true, 0, 0.0f, 1},
    {"head_64_dropout_padded", 1, 64, 16, 64, 2, 41, true, true, 12, 0.15f, 3},
    {"head_300_tiles_8_and_4", 1, 300, 4, 12, 1, 11, true, true, 2, 0.0f, 1},
    {"one_token", 2, 8, 8, 16, 2, 1, true, true, 0, 0.0f, 1},
};

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
