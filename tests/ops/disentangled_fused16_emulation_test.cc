// The fused disentangled attention's 16-bit path (ops/disentangled_fused16.h, the blocks of
// ops/disentangled_tiles16.h), emulated on the CPU (tests/ops/disentangled_emulation.h: phases
// thread by thread, the tensor-core tile products as fp32 products of the 16-bit values), against
// the fp32 CPU reference on the same 16-bit-rounded inputs, bf16 and f16, over the fp32 path's
// shapes (kCases). The GPU runs the same blocks through tests/ops/disentangled_attention_test.cc.
//
// Tolerance, derived (u: the unit roundoff, 2^-8 for bf16, 2^-11 for f16; m = 1 / (1 - p) the
// largest dropout multiplier; c the scale). The inputs are exact in both runs and every tile
// product of 16-bit values is exact in fp32, so the differences are: (1) P x mult rounded for
// P V and P^T dO, (2) dS rounded for dS K and dS^T Q, (3) dC2P / dP2C rounded for their GEMMs,
// (4) each 16-bit output rounded once, (5) delta = dO . O with O from the rounded P of (1), and
// fp32 sums in other orders (a 2e-5 relative slack). With P from the reference, colP = max_j
// sum_i P_ij, PR = max over heads and relative indices r of sum over (b, i, j) reading r of P_ij,
// dPmax = m max |dO_i . v_j| and |dS_ij| <= P_ij (|dP_ij| + |delta_i|) <= 2 P_ij dPmax:
//   E (delta's error)     <= u m max_i ||dO_i||_1 max|v|;    G = 2 dPmax + E
//   |d out| <= u (m max|v| + max|out|)
//   |d dv|  <= u (m max|dO| colP + max|dv|)
//   |d dq|  <= c (u G + E) (max|k| + [c2p] max|pk|) + u max|dq|
//   |d dk|  <= c (u G + E) colP (max|q| + [p2c] max|pq|) + u max|dk|
//   |d dpk| <= c (u G + E) max|q| PR + u max|dpk|;   |d dpq| likewise with max|k|.
#include <cmath>

#include "ops/disentangled_emulation.h"

namespace ftune::test {
namespace {

using disentangled::FusedKind;

template <class S>
S to16(float x) {
  S s;
  disentangled::round_into(&s, x);
  return s;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float e : v) m = std::max(m, std::fabs(e));
  return m;
}

// Inputs rounded to S in place (the reference then sees the values the 16-bit path reads).
template <class S>
void round_inputs(Inputs& in) {
  for (auto* v : {&in.q, &in.k, &in.v, &in.pk, &in.pq, &in.dout})
    for (float& e : *v) e = disentangled::to_f32(to16<S>(e));
}

template <class S>
std::vector<S> as16(const std::vector<float>& v) {
  std::vector<S> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to16<S>(v[i]);
  return out;
}

template <class S>
std::vector<float> as32(const std::vector<S>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = disentangled::to_f32(v[i]);
  return out;
}

// The 16-bit path on the emulation; the position tensors and their gradients 16-bit when pos16,
// else fp32 (rounded into the workspace by the path).
template <class S>
Grads emulated16(const Inputs& in, bool pos16, HostBackend* be) {
  DisentangledArgs a = in.a;
  constexpr DType st = dtype_of<S>::value;
  a.storage = st;
  a.pk_type = a.pq_type = a.dpk_type = a.dpq_type = pos16 ? st : DType::F32;
  const int64_t C = a.spec.heads * a.spec.head_dim, N = a.B * a.T, R = 2 * a.spec.span();
  const std::vector<S> q = as16<S>(in.q), k = as16<S>(in.k), v = as16<S>(in.v),
                       dout = as16<S>(in.dout), pk16 = as16<S>(in.pk), pq16 = as16<S>(in.pq);
  const S nan16 = to16<S>(std::nanf(""));
  std::vector<S> out(N * C, nan16), dq(N * C, nan16), dk(N * C, nan16), dv(N * C, nan16),
      dpk16(R * C, nan16), dpq16(R * C, nan16);
  std::vector<float> dpk32(R * C, std::nanf("")), dpq32(R * C, std::nanf(""));
  const auto F = disentangled::fused_layout(a.spec, a.B, a.T, a.rlo, a.rhi, false);
  const auto L = disentangled::fused16_layout(a.spec, a.B, a.T, a.rlo, a.rhi, true);
  std::vector<float> saved(F.saved, std::nanf("")), ws(L.workspace, std::nanf(""));
  const void* pk = pos16 ? static_cast<const void*>(pk16.data()) : in.pk.data();
  const void* pq = pos16 ? static_cast<const void*>(pq16.data()) : in.pq.data();
  disentangled::fused16_forward<S>(*be, a, out.data(), saved.data(), q.data(), k.data(), v.data(),
                                   pk, pq, ws.data());
  std::fill(ws.begin(), ws.end(), std::nanf(""));  // backward must not rely on forward's scratch
  void* dpk = pos16 ? static_cast<void*>(dpk16.data()) : dpk32.data();
  void* dpq = pos16 ? static_cast<void*>(dpq16.data()) : dpq32.data();
  disentangled::fused16_backward<S>(*be, a, dq.data(), dk.data(), dv.data(), dpk, dpq,
                                    dout.data(), q.data(), k.data(), v.data(), pk, pq,
                                    saved.data(), ws.data());
  return Grads{as32(out), as32(dq), as32(dk), as32(dv), pos16 ? as32(dpk16) : dpk32,
               pos16 ? as32(dpq16) : dpq32};
}

// The bounds of the file's opening comment, from the inputs and the reference's P.
struct Bounds {
  double out, dq, dk, dv, dpk, dpq;
};

Bounds derive_bounds(const Inputs& in, const Grads& want, const std::vector<float>& P, double u) {
  const DisentangledArgs& a = in.a;
  const int64_t B = a.B, H = a.spec.heads, T = a.T, D = a.spec.head_dim, C = H * D;
  const double m = 1.0 / (1.0 - a.dropout_p), c = a.scale;
  double dpmax = 0, do1 = 0, colp = 0, pr = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* o = in.dout.data() + (b * T + i) * C + h * D;
        double l1 = 0;
        for (int64_t d = 0; d < D; ++d) l1 += std::fabs(o[d]);
        do1 = std::max(do1, l1);
        for (int64_t j = 0; j < T; ++j) {
          const float* vj = in.v.data() + (b * T + j) * a.ldv + h * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(o[d]) * vj[d];
          dpmax = std::max(dpmax, m * std::fabs(dot));
        }
      }
  for (int64_t h = 0; h < H; ++h) {
    std::vector<double> by_r(2 * a.spec.span(), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < T; ++j) {
        double col = 0;
        for (int64_t i = 0; i < T; ++i) {
          const double p = P[((b * H + h) * T + i) * T + j];
          col += p;
          by_r[a.rel(i, j)] += p;
        }
        colp = std::max(colp, col);
      }
    for (double x : by_r) pr = std::max(pr, x);
  }
  const double maxv = max_abs(in.v), maxq = max_abs(in.q), maxk = max_abs(in.k);
  const double maxpk = a.spec.c2p ? max_abs(in.pk) : 0, maxpq = a.spec.p2c ? max_abs(in.pq) : 0;
  const double E = u * m * do1 * maxv, G = 2 * dpmax + E, g = c * (u * G + E);
  Bounds bd;
  bd.out = u * (m * maxv + max_abs(want.out));
  bd.dv = u * (m * max_abs(in.dout) * colp + max_abs(want.dv));
  bd.dq = g * (maxk + maxpk) + u * max_abs(want.dq);
  bd.dk = g * colp * (maxq + maxpq) + u * max_abs(want.dk);
  bd.dpk = g * maxq * pr + u * max_abs(want.dpk);
  bd.dpq = g * maxk * pr + u * max_abs(want.dpq);
  return bd;
}

// max |got - want| <= bound + 2e-5 max|want|; returns the error over the bound (for the trace).
double expect_within(const std::vector<float>& got, const std::vector<float>& want, double bound,
                     const char* what) {
  double err = 0;
  bool finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    finite = finite && std::isfinite(got[i]);
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
  }
  const double allowed = bound + 2e-5 * max_abs(want);
  EXPECT_TRUE(finite) << what;
  EXPECT_LE(err, allowed) << what << ": error " << err << ", derived bound " << bound;
  return err / allowed;
}

template <class S>
void run_cases(double u) {
  std::mt19937_64 rng(test_seed());
  int n = 0;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    Inputs in = make_inputs(c, rng);
    round_inputs<S>(in);
    std::vector<float> P;
    const Grads want = reference(in, &P);
    const Bounds bd = derive_bounds(in, want, P, u);
    HostBackend be;
    const Grads got = emulated16<S>(in, ++n % 2 == 0, &be);
    EXPECT_EQ(be.launches, 3);  // forward, dq, dkv blocks
    EXPECT_GT(be.ex.products, 0);
    expect_within(got.out, want.out, bd.out, "out");
    expect_within(got.dq, want.dq, bd.dq, "dq");
    expect_within(got.dk, want.dk, bd.dk, "dk");
    expect_within(got.dv, want.dv, bd.dv, "dv");
    if (c.c2p) expect_within(got.dpk, want.dpk, bd.dpk, "dpk");
    if (c.p2c) expect_within(got.dpq, want.dpq, bd.dpq, "dpq");
  }
}

TEST(DisentangledFused16Emulation, Bf16MatchesTheCpuReferenceWithinTheDerivedBound) {
  run_cases<bf16_t>(std::ldexp(1.0, -8));
}

TEST(DisentangledFused16Emulation, F16MatchesTheCpuReferenceWithinTheDerivedBound) {
  run_cases<f16_t>(std::ldexp(1.0, -11));
}

// Every head size of the cases runs the 16-bit path (its tiles fit), 64 with the largest tiles
// its shared memory allows (up to 368: the fp32 kernel on staged copies past it); the workspace
// is less than the staged path's fp32 copies.
TEST(DisentangledFused16Emulation, TilesFitAndTheWorkspaceShrinks) {
  for (int64_t D : {4, 8, 64, 128, 300, 368}) EXPECT_TRUE(disentangled::fused16_supported(D)) << D;
  EXPECT_FALSE(disentangled::fused16_supported(369));  // the op stages fp32 copies there
  EXPECT_EQ(disentangled::fused16_tile(FusedKind::Forward, 64), 64);
  EXPECT_EQ(disentangled::fused16_tile(FusedKind::Dq, 64), 64);
  EXPECT_EQ(disentangled::fused16_tile(FusedKind::Dkv, 64), 32);
  for (FusedKind k : {FusedKind::Forward, FusedKind::Dq, FusedKind::Dkv})
    for (int64_t D : {8, 64, 128, 300})
      EXPECT_LE(disentangled::fused16_shared_bytes(k, disentangled::fused16_tile(k, D), D),
                disentangled::kMaxShared16Bytes);
  DisentangledSpec s;  // DeBERTa-v3-base, 8 x 512 tokens
  s.heads = 12, s.head_dim = 64, s.c2p = s.p2c = true, s.position_buckets = 256,
  s.max_relative_positions = 512;
  const int64_t B = 8, T = 512, NC = B * T * 768;
  const int64_t rlo = deberta_relative_index(s, -(T - 1)), rhi = deberta_relative_index(s, T - 1) + 1;
  const auto F = disentangled::fused_layout(s, B, T, rlo, rhi, true);
  const auto L = disentangled::fused16_layout(s, B, T, rlo, rhi, true);
  EXPECT_LT(L.workspace, F.workspace + 7 * NC);  // the fp32 kernel plus its staged copies
  EXPECT_EQ(L.workspace, 2 * 12 * B * T * L.Wp + 12 * B * T * L.Wh + B * 12 * T + 2 * NC +
                             2 * 512 * 768 / 2);
}

}  // namespace
}  // namespace ftune::test
