// LoRA / DoRA ops against a plain double-precision reference of PEFT's math (ops/lora.h): forward,
// every gradient (DoRA's norm held constant, as PEFT detaches it), the fused-QKV column block
// case (row-strided views), dropout masks shared by forward and backward, and the low-rank norm
// expansion against ||W + s B A|| formed explicitly. Every case runs on each device present; the
// reference is computed on the host (the dropout mask by the CPU op, which every device matches).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/memory.h"
#include "op_test_util.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/lora.h"

namespace ftune::test {
namespace {

using Vec = std::vector<double>;

struct Problem {
  int64_t N = 7, C = 6, OC = 5, r = 3;
  float s = 1.7f;
  std::vector<float> x, w, b, a, bb, m, dy;
};

Problem make(std::mt19937_64& rng, int64_t C) {
  Problem p;
  p.C = C;
  auto rnd = [&](int64_t n) { return to_vector(random_tensor({n}, rng).view()); };
  p.x = rnd(p.N * p.C), p.w = rnd(p.OC * p.C), p.b = rnd(p.OC), p.a = rnd(p.r * p.C);
  p.bb = rnd(p.OC * p.r), p.m = rnd(p.OC), p.dy = rnd(p.N * p.OC);
  for (float& v : p.m) v = 1.0f + std::fabs(v);
  return p;
}

// PEFT's DoRA (or LoRA) in double on input xd (already dropped out when dropout is on), x for the
// frozen part (the same without dropout).
struct Ref {
  Vec y, dx, da, db, dm, norm;
};

Ref reference(const Problem& p, const std::vector<float>& xd, bool dora) {
  const int64_t N = p.N, C = p.C, OC = p.OC, r = p.r;
  Ref f;
  f.norm.assign(OC, 1.0);
  Vec ba(OC * C, 0.0);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < r; ++k) ba[o * C + c] += double(p.bb[o * r + k]) * p.a[k * C + c];
  if (dora)
    for (int64_t o = 0; o < OC; ++o) {
      double sq = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double v = p.w[o * C + c] + p.s * ba[o * C + c];
        sq += v * v;
      }
      f.norm[o] = std::sqrt(sq);
    }
  Vec u(N * r, 0.0), z(N * OC, 0.0), g(N * OC);
  f.y.assign(N * OC, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < r; ++k)
      for (int64_t c = 0; c < C; ++c) u[n * r + k] += double(xd[n * C + c]) * p.a[k * C + c];
    for (int64_t o = 0; o < OC; ++o) {
      double base = 0, low = 0;
      for (int64_t c = 0; c < C; ++c) base += double(p.x[n * C + c]) * p.w[o * C + c];
      for (int64_t k = 0; k < r; ++k) low += u[n * r + k] * p.bb[o * r + k];
      z[n * OC + o] = base + p.s * low;
      const double scale = dora ? p.m[o] / f.norm[o] : 1.0;
      f.y[n * OC + o] = p.b[o] + scale * z[n * OC + o];
      g[n * OC + o] = p.dy[n * OC + o] * scale;
    }
  }
  f.dm.assign(OC, 0.0);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t n = 0; n < N; ++n) f.dm[o] += p.dy[n * OC + o] * z[n * OC + o] / f.norm[o];
  f.db.assign(OC * r, 0.0);
  f.da.assign(r * C, 0.0);
  f.dx.assign(N * C, 0.0);
  Vec h(N * r, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t o = 0; o < OC; ++o) h[n * r + k] += p.s * g[n * OC + o] * p.bb[o * r + k];
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t n = 0; n < N; ++n) f.db[o * r + k] += p.s * g[n * OC + o] * u[n * r + k];
  for (int64_t k = 0; k < r; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t n = 0; n < N; ++n) f.da[k * C + c] += h[n * r + k] * xd[n * C + c];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < r; ++k) f.dx[n * C + c] += h[n * r + k] * p.a[k * C + c];  // LoRA
  return f;
}

// The input width and dropout placement of a case: `C` past the CPU backward's column tile (256)
// and not a multiple of 4 crosses tiles and Philox groups; `rows` places x in the dropout streams
// (ops/dropout.h); the input gradient accumulates onto 1 or overwrites.
struct CaseShape {
  int64_t C = 6;
  DropoutRows rows{};
  bool accumulate_dinp = true;
};

// Runs the ops as the encoder does on columns [col, col + OC) of a wider output (the fused QKV
// case when col > 0), returns (y, dx-from-LoRA, dA, dB, dm).
void run_case(Device dev, bool dora, float p_drop, int64_t col, int64_t width,
              const CaseShape& shape = {}) {
  std::mt19937_64 rng(test_seed());
  const Problem p = make(rng, shape.C);
  const int64_t N = p.N, C = p.C, OC = p.OC, r = p.r;
  const Device cpu = Device::cpu();  // the reference's dropout masks
  const RngKey key{7, 3, 1};
  auto x = device_f32(p.x, {N, C}, dev), w = device_f32(p.w, {OC, C}, dev),
       b = device_f32(p.b, {OC}, dev), a = device_f32(p.a, {r, C}, dev),
       bb = device_f32(p.bb, {OC, r}, dev), m = device_f32(p.m, {OC}, dev);
  auto wide = zeros({N, width}, dev), u = poisoned({N, r}, dev), h = poisoned({N, r}, dev),
       z = poisoned({N, OC}, dev), norm = poisoned({OC}, dev), wsq = poisoned({OC}, dev),
       ws = poisoned({dora_norms_workspace(OC, r)}, dev), scratch = poisoned({N * C}, dev);
  TensorView y = wide.view();
  y.data = static_cast<float*>(y.data) + col;
  y.shape = Shape{N, OC};
  const LoraDropout drop{p_drop, key, scratch.view(), shape.rows};

  linear_forward(y, x.view(), w.view(), b.view());
  if (dora) {
    row_sq_norms(wsq.view(), w.view());
    dora_norms(norm.view(), wsq.view(), w.view(), a.view(), bb.view(), p.s, ws.view());
    dora_strip_bias(z.view(), y, b.view());
    lora_forward(z.view(), u.view(), x.view(), a.view(), bb.view(), p.s, drop);
    dora_output_forward(y, z.view(), b.view(), m.view(), norm.view());
  } else {
    lora_forward(y, u.view(), x.view(), a.view(), bb.view(), p.s, drop);
  }
  std::vector<float> xd = p.x;
  if (p_drop > 0) {
    auto xdv = device_f32(p.x, {N, C}, cpu);
    dropout_forward(xdv.view(), xdv.view(), p_drop, key, shape.rows);
    xd = to_vector(xdv.view());
  }
  const Ref ref = reference(p, xd, dora);
  std::vector<float> got_y;
  const std::vector<float> wide_y = to_vector(wide.view());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) got_y.push_back(wide_y[n * width + col + o]);
  expect_close(got_y, ref.y, 1e-5, "y");
  if (dora) expect_close(to_vector(norm.view()), ref.norm, 1e-5, "norm");

  // Backward: dy lives in the same columns; parameter gradients accumulate onto 1.
  std::vector<float> dwide_host(N * width, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) dwide_host[n * width + col + o] = p.dy[n * OC + o];
  auto dwide = device_f32(dwide_host, {N, width}, dev);
  TensorView dy = dwide.view();
  dy.data = static_cast<float*>(dy.data) + col;
  dy.shape = Shape{N, OC};
  auto da = device_f32(std::vector<float>(r * C, 1.0f), {r, C}, dev),
       db = device_f32(std::vector<float>(OC * r, 1.0f), {OC, r}, dev),
       dm = device_f32(std::vector<float>(OC, 1.0f), {OC}, dev),
       dx = device_f32(std::vector<float>(N * C, 1.0f), {N, C}, dev);
  if (dora) dora_output_backward(dm.view(), dy, z.view(), m.view(), norm.view());
  lora_backward(dx.view(), da.view(), db.view(), h.view(), dy, x.view(), u.view(), a.view(),
                bb.view(), p.s, shape.accumulate_dinp, drop);
  auto plus_one = [](Vec v) {
    for (double& e : v) e += 1.0;
    return v;
  };
  auto dx_want = [&](Vec v) { return shape.accumulate_dinp ? plus_one(v) : v; };
  Vec want_dx = ref.dx;
  if (p_drop > 0) {  // the LoRA input gradient goes back through the same mask
    std::vector<float> t(want_dx.begin(), want_dx.end());
    auto tv = device_f32(t, {N, C}, cpu);
    dropout_backward(tv.view(), tv.view(), p_drop, key, shape.rows);
    const auto back = to_vector(tv.view());
    want_dx.assign(back.begin(), back.end());
  }
  expect_close(to_vector(dx.view()), dx_want(want_dx), 1e-5, "dx");
  expect_close(to_vector(da.view()), plus_one(ref.da), 1e-5, "dA");
  expect_close(to_vector(db.view()), plus_one(ref.db), 1e-5, "dB");
  if (dora) expect_close(to_vector(dm.view()), plus_one(ref.dm), 1e-5, "dm");
}

class LoraOps : public OpTest {};

TEST_P(LoraOps, LoraMatchesReference) {
  run_case(device(), false, 0.0f, 0, 5);
}
TEST_P(LoraOps, LoraOnAColumnBlockOfAFusedOutput) {
  run_case(device(), false, 0.0f, 5, 15);
}
TEST_P(LoraOps, LoraDropoutMaskIsSharedByForwardAndBackward) {
  run_case(device(), false, 0.3f, 0, 5);
}
TEST_P(LoraOps, LoraDropoutAcrossColumnTilesAndPlacedRows) {
  // 7 tokens as one sequence of a 9-position stream, the step batch's row 2; 301 columns.
  run_case(device(), false, 0.3f, 0, 5, CaseShape{301, DropoutRows{2, 7, 9}, true});
  run_case(device(), false, 0.3f, 3, 9, CaseShape{301, DropoutRows{2, 7, 9}, false});
}
TEST_P(LoraOps, DoraMatchesReferenceWithDetachedNorm) {
  run_case(device(), true, 0.0f, 0, 5);
}
TEST_P(LoraOps, DoraOnAColumnBlockOfAFusedOutput) {
  run_case(device(), true, 0.0f, 10, 15);
}

TEST_P(LoraOps, RejectsBadShapes) {
  const Device dev = device();
  auto out = zeros({4, 5}, dev), u = zeros({4, 2}, dev), x = zeros({4, 3}, dev),
       a = zeros({2, 4}, dev), b = zeros({5, 2}, dev);
  EXPECT_THROW(lora_forward(out.view(), u.view(), x.view(), a.view(), b.view(), 1.0f), ShapeError);
  auto scratch_small = zeros({3}, dev), a_ok = zeros({2, 3}, dev);
  EXPECT_THROW(lora_forward(out.view(), u.view(), x.view(), a_ok.view(), b.view(), 1.0f,
                            LoraDropout{0.5f, {}, scratch_small.view()}),
               ShapeError);
}

FTUNE_INSTANTIATE_DEVICES(LoraOps);

}  // namespace
}  // namespace ftune::test
