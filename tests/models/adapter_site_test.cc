// One adapted linear module (models/adapter_site.h) against a double-precision reference of PEFT's
// LoRA Linear forward: DoRA with adapter dropout (PEFT's DoRA variant in training: the frozen
// result on the whole input x, the magnitude term and the low-rank branch on x_d = dropout(x)),
// its gradients (norm detached, as PEFT), on a plain output and on a column block of a fused one
// (the QKV case), on every device present. The mask is ftune's own (the CPU op's, which every
// device matches); tools/make_peft_fixtures.py checks the same math inside PEFT end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/adapter_site.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/op_test_util.h"

namespace ftune::test {
namespace {

using Vec = std::vector<double>;

struct Problem {
  int64_t N = 6, C = 5, OC = 4, r = 2;
  float s = 1.3f, p = 0.4f;
  std::vector<float> x, w, b, a, bb, m, dy;
};

struct Ref {
  Vec y, dx, da, db, dm;
};

// PEFT (lora/layer.py Linear.forward, lora/variants.py DoraLinearVariant.forward) in double:
//   y = x W^T + b + (m/n - 1) x_d W^T + (m/n) s (x_d A^T) B^T,  n = ||W + s B A|| (rows, detached)
Ref reference(const Problem& p, const std::vector<float>& xd, const std::vector<float>& mult) {
  const int64_t N = p.N, C = p.C, OC = p.OC, r = p.r;
  Vec norm(OC, 0.0);
  for (int64_t o = 0; o < OC; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      double v = p.w[o * C + c];
      for (int64_t k = 0; k < r; ++k) v += p.s * double(p.bb[o * r + k]) * p.a[k * C + c];
      norm[o] += v * v;
    }
    norm[o] = std::sqrt(norm[o]);
  }
  Ref f;
  f.y.assign(N * OC, 0.0);
  f.dm.assign(OC, 0.0);
  f.dx.assign(N * C, 0.0);
  f.da.assign(r * C, 0.0);
  f.db.assign(OC * r, 0.0);
  Vec u(N * r, 0.0), e(N * C, 0.0);  // e: gradient with respect to x_d
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t c = 0; c < C; ++c) u[n * r + k] += double(xd[n * C + c]) * p.a[k * C + c];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double base = p.b[o], v = 0, low = 0;
      for (int64_t c = 0; c < C; ++c) {
        base += double(p.x[n * C + c]) * p.w[o * C + c];
        v += double(xd[n * C + c]) * p.w[o * C + c];
      }
      for (int64_t k = 0; k < r; ++k) low += u[n * r + k] * p.bb[o * r + k];
      const double q = p.m[o] / norm[o], dy = p.dy[n * OC + o];
      f.y[n * OC + o] = base + (q - 1) * v + q * p.s * low;
      f.dm[o] += dy * (v + p.s * low) / norm[o];
      for (int64_t c = 0; c < C; ++c) {
        f.dx[n * C + c] += dy * p.w[o * C + c];  // the frozen layer on x
        e[n * C + c] += (q - 1) * dy * p.w[o * C + c];
      }
      for (int64_t k = 0; k < r; ++k) {
        const double g = q * dy * p.s;  // d/d(u B^T) of the scaled branch
        f.db[o * r + k] += g * u[n * r + k];
        for (int64_t c = 0; c < C; ++c) {
          e[n * C + c] += g * p.bb[o * r + k] * p.a[k * C + c];
          f.da[k * C + c] += g * p.bb[o * r + k] * xd[n * C + c];
        }
      }
    }
  for (int64_t i = 0; i < N * C; ++i) f.dx[i] += e[i] * mult[i];
  return f;
}

// A (rows, cols) view of columns [col, col + count) of a (rows, width) buffer.
TensorView block(const DeviceTensor& t, int64_t rows, int64_t col, int64_t count) {
  TensorView v = t.view();
  v.data = static_cast<float*>(v.data) + col;
  v.shape = Shape{rows, count};
  return v;
}

class AdapterSite : public OpTest {
 protected:
  // DoRA with dropout on columns [col, col + OC) of an output `width` wide; y_has_base: the
  // frozen result is already there (the fused QKV GEMM ran).
  void run(int64_t col, int64_t width, bool y_has_base) {
    const Device dev = device();
    Problem p;
    auto rnd = [&](int64_t n) { return random_values(n, rng); };
    p.x = rnd(p.N * p.C), p.w = rnd(p.OC * p.C), p.b = rnd(p.OC), p.a = rnd(p.r * p.C);
    p.bb = rnd(p.OC * p.r), p.m = rnd(p.OC), p.dy = rnd(p.N * p.OC);
    for (float& v : p.m) v = 1.0f + std::fabs(v);
    const int64_t N = p.N, C = p.C, OC = p.OC, r = p.r;
    const RngKey key{11, 5, 2};
    std::vector<float> mult(N * C, 1.0f);
    {
      HostTensor ones = tensor_from(mult, {N, C});
      dropout_forward(ones.view(), ones.view(), p.p, key);
      mult = to_vector(ones.view());
    }
    std::vector<float> xd(N * C);
    for (int64_t i = 0; i < N * C; ++i) xd[i] = p.x[i] * mult[i];
    const Ref ref = reference(p, xd, mult);

    auto x = device_f32(p.x, {N, C}, dev), w = device_f32(p.w, {OC, C}, dev),
         b = device_f32(p.b, {OC}, dev), a = device_f32(p.a, {r, C}, dev),
         bb = device_f32(p.bb, {OC, r}, dev), m = device_f32(p.m, {OC}, dev);
    auto da = device_f32(std::vector<float>(r * C, 1.0f), {r, C}, dev),
         db = device_f32(std::vector<float>(OC * r, 1.0f), {OC, r}, dev),
         dm = device_f32(std::vector<float>(OC, 1.0f), {OC}, dev);
    auto wsq = poisoned({OC}, dev), norm = poisoned({OC}, dev),
         ws = poisoned({dora_norms_workspace(OC, r)}, dev), u = poisoned({N, r}, dev),
         z = poisoned({N, OC}, dev), h = poisoned({N, r}, dev), scratch = poisoned({N * C}, dev);
    row_sq_norms(wsq.view(), w.view());
    AdapterSiteRun s;
    s.w = AdapterWeights{a.view(), bb.view(), m.view()};
    s.g = AdapterWeights{da.view(), db.view(), dm.view()};
    s.dora = true;
    s.scale = p.s;
    s.weight = s.gemm_weight = w.view();
    s.bias = b.view();
    s.weight_sq = wsq.view();
    s.norm = norm.view();
    s.norm_workspace = ws.view();
    s.u = u.view();
    s.z = z.view();
    s.h = h.view();
    s.dropout = LoraDropout{p.p, key, scratch.view()};

    auto out = zeros({N, width}, dev);
    const TensorView y = block(out, N, col, OC);
    if (y_has_base) linear_forward(y, x.view(), w.view(), b.view());
    adapter_site_forward(s, y, x.view(), x.view(), y_has_base, /*recompute=*/false);
    std::vector<float> got;
    const std::vector<float> all = to_vector(out.view());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) got.push_back(all[n * width + col + o]);
    expect_close(got, ref.y, 1e-5, "y");

    // Backward as the encoder runs it: scale, the frozen layer's input gradient, the adapter's.
    std::vector<float> dwide(N * width, 0.0f);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) dwide[n * width + col + o] = p.dy[n * OC + o];
    auto dout = device_f32(dwide, {N, width}, dev);
    const TensorView dy = block(dout, N, col, OC);
    auto dx = poisoned({N, C}, dev);
    adapter_site_backward_scale(s, dy);
    linear_backward(dx.view(), TensorView(), TensorView(), dy, x.view(), w.view());
    adapter_site_backward(s, dy, x.view(), dx.view());
    auto plus_one = [](Vec v) {
      for (double& e : v) e += 1.0;
      return v;
    };
    expect_close(to_vector(dx.view()), ref.dx, 1e-5, "dx");
    expect_close(to_vector(da.view()), plus_one(ref.da), 1e-5, "dA");
    expect_close(to_vector(db.view()), plus_one(ref.db), 1e-5, "dB");
    expect_close(to_vector(dm.view()), plus_one(ref.dm), 1e-5, "dm");
  }
};

TEST_P(AdapterSite, DoraWithDropoutMatchesPeftsDoraVariant) {
  run(0, 4, /*y_has_base=*/false);
}

TEST_P(AdapterSite, DoraWithDropoutOnAColumnBlockOfAFusedOutput) {
  run(8, 12, /*y_has_base=*/true);
}

FTUNE_INSTANTIATE_DEVICES(AdapterSite);

}  // namespace
}  // namespace ftune::test
