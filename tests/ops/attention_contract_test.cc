// The attention contract (ops/attention.h) on every device present, against a plain composition in
// double (scores, soft-cap, visibility mask, softmax, dropout, P V, and the backward of the same
// composition written out) for every combination of head grouping, causal, window, soft-cap,
// scale, layout (padded with a key mask, packed with cu_seqlens) and dropout; q, k, v and their
// gradients are strided column views of one fused projection buffer. Backward also against finite
// differences; a packed batch and the same rows padded draw the same dropout masks and give the
// same results; grouped-query attention equals multi-head attention over repeated K/V; thread
// counts do not change the bits; 16-bit storage follows fp32; bad arguments are ShapeErrors.
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "op_test_util.h"
#include "ops/attention.h"
#include "ops/cast.h"

namespace ftune::test {
namespace {

class AttentionContractTest : public OpTest {};

TensorView columns(const TensorView& m, int64_t begin, int64_t count) {
  TensorView v = m;
  v.data = static_cast<char*>(m.data) + begin * static_cast<int64_t>(dtype_size(m.dtype));
  v.shape = Shape{m.dim(0), count};
  return v;
}

// One attention problem: the spec, the sequences and the inputs, all on the host.
struct Problem {
  AttentionSpec spec;
  bool packed = false;
  int64_t T = 0;              // padded length, or the longest sequence
  std::vector<int64_t> lens;  // packed: sequence lengths; padded: B sequences of T tokens
  std::vector<int32_t> mask;  // per token, or empty
  float p = 0;
  RngKey rng{91, 5, 3};
  uint64_t row0 = 2;
  int64_t Tv = 0;  // set by finish()
  // (N, Cq + 2 Ckv): [q | k | v] per token, and the upstream gradient (N, Cq).
  std::vector<float> qkv, dout;

  int64_t B() const { return static_cast<int64_t>(lens.size()); }
  int64_t N() const {
    int64_t n = 0;
    for (int64_t l : lens) n += l;
    return n;
  }
  int64_t Cq() const { return spec.heads * spec.head_dim; }
  int64_t Ckv() const { return spec.kv_heads * spec.head_dim; }
  int64_t W() const { return Cq() + 2 * Ckv(); }
  std::vector<int64_t> starts() const {
    std::vector<int64_t> s(lens.size() + 1, 0);
    for (size_t b = 0; b < lens.size(); ++b) s[b + 1] = s[b] + lens[b];
    return s;
  }
  std::vector<int32_t> cu_seqlens() const {
    std::vector<int32_t> cu;
    for (int64_t s : starts()) cu.push_back(static_cast<int32_t>(s));
    return cu;
  }
};

void finish(Problem& pr, std::mt19937_64& rng) {
  pr.Tv = pr.T + 3;
  pr.qkv = random_values(pr.N() * pr.W(), rng, -1.5f, 1.5f);
  pr.dout = random_values(pr.N() * pr.Cq(), rng);
}

struct Result {
  std::vector<double> out, probs, dq, dk, dv;  // probs in the saved layout (N Hq, T)
};

// The contract, spelled out in double.
Result reference(const Problem& pr) {
  const AttentionSpec& s = pr.spec;
  const int64_t Hq = s.heads, D = s.head_dim, G = s.heads / s.kv_heads, T = pr.T, W = pr.W();
  const int64_t N = pr.N();
  Result r{std::vector<double>(N * pr.Cq(), 0.0), std::vector<double>(N * Hq * T, 0.0),
           std::vector<double>(N * pr.Cq(), 0.0), std::vector<double>(N * pr.Ckv(), 0.0),
           std::vector<double>(N * pr.Ckv(), 0.0)};
  auto q = [&](int64_t n, int64_t h, int64_t d) { return double(pr.qkv[n * W + h * D + d]); };
  auto k = [&](int64_t n, int64_t g, int64_t d) {
    return double(pr.qkv[n * W + pr.Cq() + g * D + d]);
  };
  auto v = [&](int64_t n, int64_t g, int64_t d) {
    return double(pr.qkv[n * W + pr.Cq() + pr.Ckv() + g * D + d]);
  };
  const auto start = pr.starts();
  for (int64_t b = 0; b < pr.B(); ++b) {
    const int64_t s0 = start[b], len = pr.lens[b];
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / G;
      for (int64_t i = 0; i < len; ++i) {
        std::vector<double> x(len), P(len, 0.0), m(len, 1.0);
        std::vector<bool> vis(len);
        bool any = false;
        for (int64_t j = 0; j < len; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q(s0 + i, h, d) * k(s0 + j, g, d);
          x[j] = double(s.scale) * dot;
          vis[j] = (pr.mask.empty() || pr.mask[s0 + j] != 0) && !(s.causal && j > i) &&
                   !(s.window.left >= 0 && i - j > s.window.left) &&
                   !(s.window.right >= 0 && j - i > s.window.right);
          any = any || vis[j];
        }
        auto capped = [&](double xx) {
          return s.softcap > 0 ? double(s.softcap) * std::tanh(xx / s.softcap) : xx;
        };
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < len; ++j)
          if (vis[j]) mx = std::max(mx, capped(x[j]));
        for (int64_t j = 0; j < len; ++j) {
          P[j] = any ? (vis[j] ? std::exp(capped(x[j]) - mx) : 0.0) : 1.0;
          sum += P[j];
        }
        const uint64_t e0 =
            (((pr.row0 + b) * Hq + h) * uint64_t(pr.Tv) + i) * uint64_t(pr.Tv);
        for (int64_t j = 0; j < len; ++j) {
          P[j] /= sum;
          r.probs[((s0 * Hq) + h * len + i) * T + j] = P[j];
          if (pr.p > 0) m[j] = philox_uniform_at(pr.rng, e0 + j) >= pr.p ? 1.0 / (1.0 - pr.p) : 0.0;
          for (int64_t d = 0; d < D; ++d)
            r.out[(s0 + i) * pr.Cq() + h * D + d] += P[j] * m[j] * v(s0 + j, g, d);
        }
        // Backward of the same composition for the upstream gradient dout.
        std::vector<double> dP(len);
        double rs = 0;
        for (int64_t j = 0; j < len; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(pr.dout[(s0 + i) * pr.Cq() + h * D + d]) * v(s0 + j, g, d);
          dP[j] = m[j] * dot;
          rs += P[j] * dP[j];
        }
        for (int64_t j = 0; j < len; ++j) {
          double dS = P[j] * (dP[j] - rs);
          if (s.softcap > 0) {
            const double t = std::tanh(x[j] / s.softcap);
            dS *= 1 - t * t;
          }
          for (int64_t d = 0; d < D; ++d) {
            r.dq[(s0 + i) * pr.Cq() + h * D + d] += s.scale * dS * k(s0 + j, g, d);
            r.dk[(s0 + j) * pr.Ckv() + g * D + d] += s.scale * dS * q(s0 + i, h, d);
            r.dv[(s0 + j) * pr.Ckv() + g * D + d] +=
                P[j] * m[j] * double(pr.dout[(s0 + i) * pr.Cq() + h * D + d]);
          }
        }
      }
    }
  }
  return r;
}

struct Got {
  std::vector<float> out, probs, dq, dk, dv;
};

// The op on `dev` with q, k, v (and dq, dk, dv) as column views of fused buffers.
Got run_op(const Problem& pr, Device dev, DType dtype = DType::F32, int64_t workspace = -1) {
  const int64_t N = pr.N(), Cq = pr.Cq(), Ckv = pr.Ckv(), W = pr.W();
  auto to_dtype = [&](const std::vector<float>& x, Shape shape) {
    auto f = device_f32(x, shape, dev);
    if (dtype == DType::F32) return f;
    auto t = zeros(shape, dev, dtype);
    cast(t.view(), f.view());
    return t;
  };
  auto back = [&](const TensorView& t) {
    if (t.dtype == DType::F32) return to_vector(t);
    auto f = zeros(t.shape, dev);
    cast(f.view(), t);
    return to_vector(f.view());
  };
  auto fused = to_dtype(pr.qkv, {N, W});
  auto dfused = to_dtype(std::vector<float>(N * W, NAN), {N, W});
  auto dout = to_dtype(pr.dout, {N, Cq});
  auto out = to_dtype(std::vector<float>(N * Cq, NAN), {N, Cq});
  auto probs = poisoned({N * pr.spec.heads * pr.T}, dev);
  auto cu = device_i32(pr.packed ? pr.cu_seqlens() : std::vector<int32_t>{0}, {pr.packed ? pr.B() + 1 : 1}, dev);
  auto mask = device_i32(pr.mask.empty() ? std::vector<int32_t>{0} : pr.mask,
                         {pr.mask.empty() ? 1 : N}, dev);
  const int64_t ws_floats =
      workspace >= 0 ? workspace
                     : attention_buffers(pr.spec, dev, false, pr.B(), N, pr.T, true).workspace;
  auto ws = zeros({std::max<int64_t>(ws_floats, 1)}, dev);
  AttentionCall c;
  c.spec = pr.spec;
  c.rows = {pr.B(), pr.T, pr.packed ? cu.view() : TensorView(),
            pr.mask.empty() ? TensorView() : mask.view()};
  c.dropout_p = pr.p;
  c.rng = pr.rng;
  c.place = DropoutRows{pr.row0, 0, pr.Tv};
  c.workspace = ws.view().flat_range(0, ws_floats);
  const TensorView f = fused.view(), df = dfused.view();
  const TensorView q = columns(f, 0, Cq), k = columns(f, Cq, Ckv), v = columns(f, Cq + Ckv, Ckv);
  attention_forward(c, out.view(), probs.view(), q, k, v);
  attention_backward(c, columns(df, 0, Cq), columns(df, Cq, Ckv), columns(df, Cq + Ckv, Ckv),
                     dout.view(), q, k, v, out.view(), probs.view());
  Got g{back(out.view()), to_vector(probs.view()), {}, {}, {}};
  const auto d = back(df);
  for (int64_t n = 0; n < N; ++n) {
    g.dq.insert(g.dq.end(), d.begin() + n * W, d.begin() + n * W + Cq);
    g.dk.insert(g.dk.end(), d.begin() + n * W + Cq, d.begin() + n * W + Cq + Ckv);
    g.dv.insert(g.dv.end(), d.begin() + n * W + Cq + Ckv, d.begin() + (n + 1) * W);
  }
  return g;
}

// Every output of the op within tolerance of the reference (a Result in double, or another Got).
template <typename Want>
void expect_all_close(const Got& got, const Want& want, double out_tol, double probs_tol,
                      double grad_tol) {
  expect_close(got.out, want.out, out_tol, "out");
  expect_close(got.probs, want.probs, probs_tol, "probs");
  // The gradients against the largest of them: where a query sees one key alone (causal with
  // window (0, 0)) dq and dk are exactly zero in double, and a float kernel leaves rounding of
  // the size of dv's (an H200 gave dk = -3.5e-09 with |dv| ~ 1).
  double grads = 1e-6;
  for (const auto* t : {&want.dq, &want.dk, &want.dv})
    for (const auto v : *t) grads = std::max(grads, std::fabs(double(v)));
  expect_close(got.dq, want.dq, grad_tol, "dq", grads);
  expect_close(got.dk, want.dk, grad_tol, "dk", grads);
  expect_close(got.dv, want.dv, grad_tol, "dv", grads);
}

// Sequences for a layout: padded rows of T = 7 with a key mask (a full row, right padding, a hole
// and left padding, an all-padding row), or packed rows of lengths 5, 1, 7, 0, 4 (one with a
// padding key when `packed_mask`).
void layout(Problem& pr, bool packed, bool packed_mask = false) {
  pr.packed = packed;
  if (!packed) {
    pr.T = 7;
    pr.lens = {7, 7, 7, 7, 7};
    pr.mask = {1, 1, 1, 1, 1, 1, 1,  // full
               1, 1, 1, 1, 0, 0, 0,  // right padded
               1, 0, 1, 1, 1, 1, 0,  // a hole
               0, 0, 0, 1, 1, 1, 1,  // left padded
               0, 0, 0, 0, 0, 0, 0};  // all padding
  } else {
    pr.T = 8;  // longer than every sequence: the bound need not be tight
    pr.lens = {5, 1, 7, 0, 4};
    pr.mask.clear();
    if (packed_mask) {
      pr.mask.assign(17, 1);
      pr.mask[5 + 1 + 3] = 0;
    }
  }
}

AttentionSpec spec(int64_t hq, int64_t hkv, int64_t d, bool causal, AttentionWindow w,
                   float softcap, bool default_scale) {
  AttentionSpec s;
  s.heads = hq;
  s.kv_heads = hkv;
  s.head_dim = d;
  s.causal = causal;
  s.window = w;
  s.softcap = softcap;
  s.scale = default_scale ? default_attention_scale(d) : 0.37f;
  return s;
}

TEST_P(AttentionContractTest, EveryFeatureCombinationMatchesThePlainComposition) {
  struct Heads {
    int64_t q, kv, d;
  };
  const AttentionWindow windows[] = {{-1, -1}, {2, -1}, {1, 2}, {0, 0}};
  int cases = 0;
  for (const Heads hd : {Heads{2, 2, 4}, Heads{4, 2, 6}, Heads{3, 1, 8}})
    for (bool causal : {false, true})
      for (const AttentionWindow w : windows)
        for (float softcap : {0.0f, 1.5f})
          for (int lay : {0, 1, 2})
            for (float p : {0.0f, 0.3f}) {
              Problem pr;
              pr.spec = spec(hd.q, hd.kv, hd.d, causal, w, softcap, (cases % 2) == 0);
              layout(pr, lay > 0, lay == 2);
              pr.p = p;
              finish(pr, rng);
              SCOPED_TRACE(::testing::Message()
                           << "Hq " << hd.q << " Hkv " << hd.kv << " causal " << causal
                           << " window (" << w.left << ", " << w.right << ") softcap " << softcap
                           << " layout " << lay << " p " << p << " scale " << pr.spec.scale);
              const Result want = reference(pr);
              const Got got = run_op(pr, device());
              expect_all_close(got, want, 2e-5, 2e-6, 5e-5);
              ++cases;
            }
  EXPECT_EQ(cases, 288);
}

TEST_P(AttentionContractTest, LongSequencesMatchThePlainCompositionBlockByBlock) {
  // Causal and windowed calls run in blocks of queries over bands of keys (ops/attention_cpu.cc):
  // sequences of several blocks, bands that start past 0, a padding hole and left padding
  // (uniform rows inside a block), GQA, soft-cap and dropout, against the plain composition.
  struct Case {
    bool causal;
    AttentionWindow w;
    bool packed;
  };
  for (const Case cs : {Case{true, {-1, -1}, true}, Case{true, {40, -1}, false},
                        Case{false, {30, 20}, true}, Case{false, {-1, 5}, false},
                        Case{true, {0, -1}, true}}) {
    Problem pr;
    pr.spec = spec(4, 2, 8, cs.causal, cs.w, 2.0f, false);
    pr.packed = cs.packed;
    if (cs.packed) {
      pr.T = 150;
      pr.lens = {150, 70, 1, 130};
      pr.mask.assign(351, 1);
      pr.mask[150 + 66] = 0;  // a hole in the second sequence
    } else {
      pr.T = 140;
      pr.lens = {140, 140};
      pr.mask.assign(280, 1);
      for (int t = 0; t < 70; ++t) pr.mask[140 + t] = 0;  // left padding past the first block
      for (int t = 100; t < 140; ++t) pr.mask[t] = 0;     // right padding
    }
    pr.p = 0.2f;
    finish(pr, rng);
    SCOPED_TRACE(::testing::Message() << "causal " << cs.causal << " window (" << cs.w.left
                                      << ", " << cs.w.right << ") packed " << cs.packed);
    const Result want = reference(pr);
    const Got got = run_op(pr, device());
    expect_all_close(got, want, 2e-5, 2e-6, 5e-5);
  }
}

TEST_P(AttentionContractTest, BackwardMatchesFiniteDifferences) {
  // The composition above is itself checked here: the op's gradients against central differences
  // of sum(out * dout), for the features that change the backward (grouping, soft-cap, windows,
  // packing, dropout held fixed). No all-padding or left-padded row: their forward does not
  // depend on q and k (uniform attention) while their backward follows HF's autograd.
  struct Case {
    int64_t hq, hkv;
    bool causal;
    AttentionWindow w;
    float softcap, p;
    bool packed;
  };
  for (const Case cs : {Case{2, 2, false, {-1, -1}, 0.0f, 0.2f, false},
                        Case{4, 2, true, {2, -1}, 1.5f, 0.0f, true},
                        Case{3, 1, false, {1, 2}, 1.2f, 0.3f, true},
                        Case{4, 1, true, {-1, -1}, 0.0f, 0.25f, false}}) {
    Problem pr;
    pr.spec = spec(cs.hq, cs.hkv, 4, cs.causal, cs.w, cs.softcap, false);
    layout(pr, cs.packed);
    if (!cs.packed) {  // right padding and a hole only
      pr.lens.resize(3);
      pr.mask.resize(3 * 7);
    }
    pr.p = cs.p;
    finish(pr, rng);
    SCOPED_TRACE(::testing::Message() << "Hq " << cs.hq << " Hkv " << cs.hkv << " causal "
                                      << cs.causal << " softcap " << cs.softcap);
    const Got g = run_op(pr, device());
    std::vector<float> analytic;  // in the fused [q | k | v] order of pr.qkv
    for (int64_t n = 0; n < pr.N(); ++n) {
      analytic.insert(analytic.end(), g.dq.begin() + n * pr.Cq(), g.dq.begin() + (n + 1) * pr.Cq());
      analytic.insert(analytic.end(), g.dk.begin() + n * pr.Ckv(),
                      g.dk.begin() + (n + 1) * pr.Ckv());
      analytic.insert(analytic.end(), g.dv.begin() + n * pr.Ckv(),
                      g.dv.begin() + (n + 1) * pr.Ckv());
    }
    auto loss = [&]() { return weighted_sum(run_op(pr, device()).out, pr.dout); };
    expect_gradient(loss, pr.qkv.data(), int64_t(pr.qkv.size()), analytic, 3e-3, "dqkv", 1e-2f,
                    160);
  }
}

TEST_P(AttentionContractTest, PackedAndPaddedRowsDrawTheSameMasksAndAgree) {
  // Rows of lengths 3, 7, 5 at rows 4.. of a step batch: packed back to back, and padded to 7 with
  // a key mask, with the same dropout stream length. Real tokens get the same outputs and
  // gradients; padded keys get zero dk, dv.
  const std::vector<int64_t> lens = {3, 7, 5};
  for (bool causal : {false, true}) {
    Problem packed;
    packed.spec = spec(4, 2, 8, causal, causal ? AttentionWindow{3, -1} : AttentionWindow{},
                       causal ? 2.0f : 0.0f, true);
    packed.packed = true;
    packed.T = 7;
    packed.lens = lens;
    packed.p = 0.4f;
    finish(packed, rng);
    packed.Tv = 12;
    Problem padded = packed;
    padded.packed = false;
    padded.lens = {7, 7, 7};
    padded.mask.assign(21, 0);
    padded.qkv.assign(21 * packed.W(), 0.5f);  // padding tokens hold junk
    padded.dout.assign(21 * packed.Cq(), 0.0f);  // padding rows' outputs feed nothing
    const auto start = packed.starts();
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t t = 0; t < lens[b]; ++t) {
        padded.mask[b * 7 + t] = 1;
        for (int64_t c = 0; c < packed.W(); ++c)
          padded.qkv[(b * 7 + t) * packed.W() + c] = packed.qkv[(start[b] + t) * packed.W() + c];
        for (int64_t c = 0; c < packed.Cq(); ++c)
          padded.dout[(b * 7 + t) * packed.Cq() + c] = packed.dout[(start[b] + t) * packed.Cq() + c];
      }
    const Got a = run_op(packed, device()), p = run_op(padded, device());
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t t = 0; t < 7; ++t) {
        const int64_t pn = b * 7 + t, an = start[b] + t;
        auto same = [&](const std::vector<float>& x, const std::vector<float>& y, int64_t C,
                        const char* what) {
          for (int64_t c = 0; c < C; ++c) {
            const float want = t < lens[b] ? x[an * C + c] : 0.0f;
            if (t < lens[b] || std::string(what) != "dq") {  // padding queries' dq is unused
              ASSERT_NEAR(y[pn * C + c], want, 2e-6 * (1 + std::fabs(want)))
                  << what << " row " << b << " t " << t << " causal " << causal;
            }
          }
        };
        if (t < lens[b]) same(a.out, p.out, packed.Cq(), "out");
        same(a.dq, p.dq, packed.Cq(), "dq");
        same(a.dk, p.dk, packed.Ckv(), "dk");
        same(a.dv, p.dv, packed.Ckv(), "dv");
      }
  }
}

TEST_P(AttentionContractTest, GroupedQueryAttentionIsMultiHeadOverRepeatedKeysAndValues) {
  // HF's repeat_kv: query head h reads kv head h / (Hq / Hkv). The GQA call equals an MHA call
  // whose K/V repeat each kv head for its group; dk, dv of a kv head sum its group's.
  Problem gqa;
  gqa.spec = spec(6, 2, 4, true, {-1, -1}, 0.0f, true);
  layout(gqa, true);
  gqa.p = 0.3f;
  finish(gqa, rng);
  Problem mha = gqa;
  mha.spec.kv_heads = 6;
  const int64_t D = 4, N = gqa.N();
  mha.qkv.clear();
  for (int64_t n = 0; n < N; ++n) {
    const float* row = gqa.qkv.data() + n * gqa.W();
    mha.qkv.insert(mha.qkv.end(), row, row + gqa.Cq());
    for (int part = 0; part < 2; ++part)
      for (int64_t h = 0; h < 6; ++h) {
        const float* kv = row + gqa.Cq() + part * gqa.Ckv() + (h / 3) * D;
        mha.qkv.insert(mha.qkv.end(), kv, kv + D);
      }
  }
  const Got g = run_op(gqa, device()), m = run_op(mha, device());
  expect_close(g.out, m.out, 1e-6, "out");
  expect_close(g.dq, m.dq, 1e-6, "dq");
  std::vector<float> dk(N * gqa.Ckv(), 0.0f), dv(N * gqa.Ckv(), 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t d = 0; d < D; ++d) {
        dk[n * gqa.Ckv() + (h / 3) * D + d] += m.dk[n * 24 + h * D + d];
        dv[n * gqa.Ckv() + (h / 3) * D + d] += m.dv[n * 24 + h * D + d];
      }
  expect_close(g.dk, dk, 1e-6, "dk");
  expect_close(g.dv, dv, 1e-6, "dv");
}

TEST_P(AttentionContractTest, ResultsDoNotDependOnThreadCount) {
  Problem pr;
  pr.spec = spec(4, 1, 8, true, {3, -1}, 1.5f, false);
  layout(pr, true);
  pr.p = 0.2f;
  finish(pr, rng);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    const Got g = run_op(pr, device());
    std::vector<float> all = g.out;
    for (const auto* v : {&g.probs, &g.dq, &g.dk, &g.dv}) all.insert(all.end(), v->begin(), v->end());
    if (first.empty()) first = all;
    EXPECT_EQ(all, first) << threads << " threads";
  }
  set_compute_threads(0);
}

TEST_P(AttentionContractTest, SixteenBitStorageFollowsFp32) {
  Problem pr;
  pr.spec = spec(4, 2, 8, true, {2, -1}, 2.0f, true);
  layout(pr, true);
  pr.p = 0.2f;
  finish(pr, rng);
  const Got want = run_op(pr, device());
  for (DType t : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const Got got = run_op(pr, device(), t);
    const double tol = t == DType::BF16 ? 3e-2 : 4e-3;
    expect_close(got.out, want.out, tol, "out");
    expect_close(got.dq, want.dq, tol, "dq");
    expect_close(got.dk, want.dk, tol, "dk");
    expect_close(got.dv, want.dv, tol, "dv");
  }
}

TEST_P(AttentionContractTest, MatchesTheCpuAtModelShapesWithAChunkedWorkspace) {
  // Sequences longer than a CUDA block (150 tokens) and a head size over it (D = 136) in one
  // shape; many short packed sequences with the smallest workspace the CUDA backward accepts
  // (Hq T floats: one sequence per chunk) in the other. On the CPU device both sides are the CPU.
  struct Shape5 {
    int64_t hq, hkv, d;
    bool packed;
  };
  for (const Shape5 sh : {Shape5{2, 1, 136, false}, Shape5{8, 2, 16, true}}) {
    Problem pr;
    pr.spec = spec(sh.hq, sh.hkv, sh.d, true, {40, -1}, 3.0f, true);
    pr.packed = sh.packed;
    if (sh.packed) {
      pr.T = 9;
      for (int b = 0; b < 23; ++b) pr.lens.push_back(1 + (b * 5) % 9);
    } else {
      pr.T = 150;
      pr.lens = {150, 150};
      pr.mask.assign(300, 1);
      for (int t = 120; t < 150; ++t) pr.mask[t] = 0;
      for (int t = 0; t < 10; ++t) pr.mask[150 + t] = 0;  // left padding: uniform rows
    }
    pr.p = 0.15f;
    finish(pr, rng);
    const int64_t ws = device().is_cpu() ? -1 : pr.spec.heads * pr.T;
    const Got got = run_op(pr, device(), DType::F32, ws), want = run_op(pr, Device::cpu());
    expect_all_close(got, want, 1e-5, 1e-5, 1e-5);
  }
}

TEST(AttentionContract, HfWindowKeysMapToDistances) {
  // Mistral / Qwen2 / Gemma 2-3: kv_idx > q_idx - W (with causal): the query and W - 1 before it.
  EXPECT_EQ(hf_sliding_window(4096).left, 4095);
  EXPECT_EQ(hf_sliding_window(4096).right, -1);
  // Gemma 3 bidirectional sliding layers, config.json's W: |q - kv| < W // 2 + 1.
  EXPECT_EQ(hf_bidirectional_sliding_window(512).left, 256);
  EXPECT_EQ(hf_bidirectional_sliding_window(512).right, 256);
  // ModernBERT local_attention 128: |q - kv| <= 64.
  EXPECT_EQ(hf_local_attention(128).left, 64);
  EXPECT_EQ(hf_local_attention(128).right, 64);
  EXPECT_THROW(hf_sliding_window(0), ShapeError);
  EXPECT_EQ(default_attention_scale(64), 0.125f);
}

TEST_P(AttentionContractTest, BadArgumentsAreShapeErrorsThatTouchNothing) {
  Problem pr;
  pr.spec = spec(4, 2, 4, false, {-1, -1}, 0.0f, true);
  layout(pr, true);
  finish(pr, rng);
  const int64_t N = pr.N();
  auto fused = device_f32(pr.qkv, {N, pr.W()}, device());
  auto out = poisoned({N, pr.Cq()}, device());
  auto probs = poisoned({N * 4 * pr.T}, device());
  auto ws = zeros({attention_workspace(pr.T, 4) + 4 * pr.T}, device());
  auto expect_error = [&](AttentionCall c, const char* needle, TensorView saved = {}) {
    const TensorView f = fused.view();
    try {
      attention_forward(c, out.view(), saved.defined() ? saved : probs.view(), columns(f, 0, 16),
                        columns(f, 16, 8), columns(f, 24, 8));
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto cu = device_i32(pr.cu_seqlens(), {pr.B() + 1}, device());
  AttentionCall good;
  good.spec = pr.spec;
  good.rows = {pr.B(), pr.T, cu.view(), {}};
  good.workspace = ws.view();
  AttentionCall c = good;
  c.spec.kv_heads = 3;
  expect_error(c, "key/value heads");
  c = good;
  c.spec.scale = 0;
  expect_error(c, "scale");
  c = good;
  c.spec.window.left = -2;
  expect_error(c, "window");
  c = good;
  c.rows.cu_seqlens = {};
  expect_error(c, "cu_seqlens");
  c = good;
  c.rows.max_seq = 6;  // a sequence of 7
  if (device().is_cpu()) expect_error(c, "max_seq");
  c = good;
  c.dropout_p = 1.0f;
  expect_error(c, "dropout");
  c = good;
  auto small = poisoned({N * 4 * pr.T - 1}, device());
  expect_error(c, "training.attention: ftune", small.view());
  for (float x : to_vector(out.view())) ASSERT_TRUE(std::isnan(x));
}

FTUNE_INSTANTIATE_DEVICES(AttentionContractTest);

}  // namespace
}  // namespace ftune::test
