// The fused CUDA disentangled attention's host emulation, shared by its tests
// (disentangled_fused_emulation_test.cc: fp32; disentangled_fused16_emulation_test.cc: 16-bit):
// an Exec that runs each block phase thread by thread (kThreads "threads", the kernel's loop and
// reduction order) and each warp-level tile product (ex.mma) as the same product in fp32 from the
// 16-bit values; a backend that runs the CUDA backend's GEMMs on OpenBLAS and the grid's blocks one
// after another, with NaN in shared memory at each block's start (nothing carries over, and a
// product that reads what no phase wrote poisons its result); random inputs; the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cast.h"
#include "ops/disentangled_fused.h"
#include "ops/disentangled_fused16.h"
#include "ops/op_test_util.h"
#include "ops/primitives_cpu.h"

namespace ftune::test {

using disentangled::FusedKind;
using disentangled::FusedPtrs;

struct HostExec {
  static constexpr int kNT = disentangled::kThreads;
  template <class F>
  void phase(F&& f) {
    for (int t = 0; t < kNT; ++t) f(t);
  }
  // The warp-level product: C (M, N) [+]= A (M, K) B (K, N), each product of two 16-bit values
  // exact in fp32, the sum in k order (WMMA's order inside a fragment is the hardware's; the
  // tests' tolerances cover any fp32 order).
  template <class S>
  void mma(float* C, int64_t ldc, disentangled::MmaOperand<S> A, disentangled::MmaOperand<S> B,
           int64_t M, int64_t N, int64_t K, bool accumulate) {
    EXPECT_TRUE(M % 16 == 0 && N % 16 == 0 && K % 16 == 0) << M << " " << N << " " << K;
    EXPECT_TRUE(ldc % 4 == 0 && A.ld % 8 == 0 && B.ld % 8 == 0) << "WMMA leading dimensions";
    ++products;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; ++k) s += A.at(m, k) * B.at(k, n);
        C[m * ldc + n] = accumulate ? C[m * ldc + n] + s : s;
      }
  }
  int64_t products = 0;
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
  // The 16-bit path's backend (ops/disentangled_fused16.h).
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
            DType at, int64_t lda, const void* B, DType bt, int64_t ldb, float beta, void* C,
            DType ct, int64_t ldc) {
    EXPECT_EQ(at, bt) << "cuBLASLt takes A and B of one type";
    EXPECT_TRUE(ct == DType::F32 || beta == 0.0f) << "a 16-bit C only as a pure output";
    const std::vector<float> a32 = as_f32(A, at, ta ? K : M, ta ? M : K, lda);
    const std::vector<float> b32 = as_f32(B, bt, tb ? N : K, tb ? K : N, ldb);
    if (ct == DType::F32) {
      cpu::gemm(ta, tb, M, N, K, alpha, a32.data(), ta ? M : K, b32.data(), tb ? K : N, beta,
                static_cast<float*>(C), ldc);
      return;
    }
    std::vector<float> c32(M * N);
    cpu::gemm(ta, tb, M, N, K, alpha, a32.data(), ta ? M : K, b32.data(), tb ? K : N, 0.0f,
              c32.data(), N);
    cast(C, ct, ldc, c32.data(), DType::F32, N, M, N);
  }
  void zero(void* p, DType t, int64_t ld, int64_t cols, int64_t rows) {
    const size_t es = dtype_size(t);
    for (int64_t r = 0; r < rows; ++r) std::memset(static_cast<char*>(p) + r * ld * es, 0, cols * es);
  }
  void cast(void* dst, DType dt, int64_t ldd, const void* src, DType st, int64_t lds,
            int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
      cpu::cast(static_cast<char*>(dst) + r * ldd * dtype_size(dt), dt,
                static_cast<const char*>(src) + r * lds * dtype_size(st), st, cols);
  }
  template <class S>
  void blocks16(FusedKind kind, const DisentangledArgs& a, const disentangled::Fused16Ptrs<S>& t0,
                int64_t tile, int64_t bh, int64_t tiles) {
    ++launches;
    std::vector<char> sm(disentangled::fused16_shared_bytes(kind, tile, a.spec.head_dim));
    EXPECT_LE(static_cast<int64_t>(sm.size()), disentangled::kMaxShared16Bytes);
    disentangled::Fused16Ptrs<S> t = t0;
    resolve_micro(t.base.rng, t.base.row0);
    for (int64_t x = 0; x < bh; ++x)
      for (int64_t y = 0; y < tiles; ++y) {
        std::memset(sm.data(), 0xff, sm.size());  // NaN in every type: nothing carries over
        if (kind == FusedKind::Forward)
          disentangled::forward_block16(ex, a, t, tile, y, x, sm.data());
        else if (kind == FusedKind::Dq)
          disentangled::dq_block16(ex, a, t, tile, y, x, sm.data());
        else
          disentangled::dkv_block16(ex, a, t, tile, y, x, sm.data());
      }
  }
  static std::vector<float> as_f32(const void* p, DType t, int64_t rows, int64_t cols,
                                   int64_t ld) {
    std::vector<float> out(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      cpu::cast(out.data() + r * cols, DType::F32,
                static_cast<const char*>(p) + r * ld * dtype_size(t), t, cols);
    return out;
  }
  HostExec ex;
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

inline Inputs make_inputs(const Case& c, std::mt19937_64& rng) {
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

inline Grads reference(const Inputs& in, std::vector<float>* probs_out = nullptr) {
  const DisentangledArgs& a = in.a;
  const int64_t C = a.spec.heads * a.spec.head_dim, N = a.B * a.T, R = 2 * a.spec.span();
  Grads g{std::vector<float>(N * C), std::vector<float>(N * C), std::vector<float>(N * C),
          std::vector<float>(N * C), std::vector<float>(R * C), std::vector<float>(R * C)};
  std::vector<float> probs(a.B * a.spec.heads * a.T * a.T);
  std::vector<float> ws(compute_threads() * cpu::disentangled_workspace_per_thread(a, true));
  // (fp32 tensors: a.storage and the position types are f32)
  cpu::disentangled_attention_forward(a, g.out.data(), probs.data(), in.q.data(), in.k.data(),
                                      in.v.data(), in.pk.data(), in.pq.data(), ws.data());
  cpu::disentangled_attention_backward(a, g.dq.data(), g.dk.data(), g.dv.data(), g.dpk.data(),
                                       g.dpq.data(), in.dout.data(), in.q.data(), in.k.data(),
                                       in.v.data(), in.pk.data(), in.pq.data(), probs.data(),
                                       ws.data());
  if (probs_out) *probs_out = probs;
  return g;
}

inline Grads emulated(const Inputs& in, int* launches = nullptr) {
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

// The shapes the fused path's tests run: sequences that are not a multiple of the tiles, longer than
// the bucket window, several heads, padded rows, c2p / p2c alone and together, plain clamped
// distances, head sizes that pick every tile size, strided q/k/v (the fused projection's columns)
// and dropout.
inline constexpr const Case kCases[] = {
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

}  // namespace ftune::test
