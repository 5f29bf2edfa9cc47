// The decoder families' ops (RMSNorm, RoPE, gated activations, last-token pooling, scaling): values against
// double-precision references of HF's formulas, gradients against finite differences, strided
// views of a fused projection, and HF's pooling rule on right / left padding, pad == eos, rows of
// padding only, no pad id and packed rows.
#include <cmath>

#include "op_test_util.h"
#include "ops/cast.h"
#include "ops/glu.h"
#include "ops/last_token.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scale.h"

namespace ftune::test {
namespace {

class DecoderOpsTest : public OpTest {};

std::vector<int32_t> ints(TensorView v) {
  HostTensor h(DType::I32, v.shape);
  copy(h.view(), v);
  return std::vector<int32_t>(h.data<int32_t>(), h.data<int32_t>() + h.numel());
}

// Columns [begin, begin + cols) of a contiguous (rows, ld) tensor.
TensorView columns(TensorView full, int64_t begin, int64_t cols) {
  TensorView v = full;
  v.data = static_cast<float*>(full.data) + begin;
  v.shape = Shape{full.dim(0), cols};
  return v;
}

// RMSNorm reference in double: rows of `heads` groups of C values at stride ld.
std::vector<double> rms_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t N,
                            int64_t heads, int64_t C, int64_t ld, int64_t begin, float offset) {
  std::vector<double> out(N * heads * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const float* xr = x.data() + n * ld + begin + h * C;
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * xr[c];
      const double rs = 1 / std::sqrt(ss / C + 1e-6);
      for (int64_t c = 0; c < C; ++c) out[(n * heads + h) * C + c] = xr[c] * rs * (offset + w[c]);
    }
  return out;
}

TEST_P(DecoderOpsTest, RmsNormBothFormsStridedHeadsAndGradients) {
  const int64_t N = 5, heads = 2, C = 7, ld = 20, begin = 3;
  for (float offset : {0.0f, 1.0f}) {
    auto x = random_values(N * ld, rng, -2, 2);
    auto w = random_values(C, rng, -0.5f, 1.5f);
    auto dx_full = device_f32(x, {N, ld}, device());
    auto dw = device_f32(w, {C}, device());
    auto out = poisoned({N, heads * C}, device());
    auto rstd = poisoned({N * heads}, device());
    const TensorView xin = columns(dx_full.view(), begin, heads * C);
    rms_norm_forward(out.view(), rstd.view(), xin, dw.view(), 1e-6f, offset, heads);
    const auto want = rms_ref(x, w, N, heads, C, ld, begin, offset);
    expect_close(to_vector(out.view()), want, 2e-6, "rms_norm out");

    const auto r = random_values(N * heads * C, rng);
    auto dout = device_f32(r, {N, heads * C}, device());
    auto gw = device_f32(std::vector<float>(C, 0.5f), {C}, device());  // accumulates onto 0.5
    auto ws = zeros({std::max<int64_t>(1, rms_norm_backward_workspace(device(), C))}, device());
    // In place: dinp aliases dout.
    rms_norm_backward(dout.view(), gw.view(), dout.view(), xin, dw.view(), rstd.view(), offset,
                      ws.view(), heads);
    auto loss = [&]() {
      const auto o = rms_ref(x, w, N, heads, C, ld, begin, offset);
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * r[i];
      return s;
    };
    // Gradient of x on its columns only.
    std::vector<float> gx_full(N * ld, 0.0f);
    const auto gx = to_vector(dout.view());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < heads * C; ++j) gx_full[n * ld + begin + j] = gx[n * heads * C + j];
    expect_gradient(loss, x.data(), N * ld, gx_full, 1e-3, "rms_norm dinp", 1e-3f, 100);
    auto gwv = to_vector(gw.view());
    for (float& g : gwv) g -= 0.5f;
    expect_gradient(loss, w.data(), C, gwv, 1e-3, "rms_norm dweight", 1e-3f);
  }
}

TEST_P(DecoderOpsTest, RopeRotatesAsHfAndItsBackwardIsTheTranspose) {
  const int64_t N = 6, heads = 3, D = 8, ld = 40, begin = 4;
  for (int64_t R : {D, int64_t{4}}) {  // full and partial rotary
    const float scaling = R == D ? 1.0f : 0.75f;
    auto x = random_values(N * ld, rng);
    std::vector<float> inv(R / 2);
    for (int64_t i = 0; i < R / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, float(2 * i) / R);
    const std::vector<int32_t> pos = {0, 1, 2, 7, 3, 1000};
    auto dxf = device_f32(x, {N, ld}, device());
    auto dpos = device_i32(pos, {N}, device());
    auto dinv = device_f32(inv, {R / 2}, device());
    const TensorView xv = columns(dxf.view(), begin, heads * D);
    rope_forward(xv, dpos.view(), dinv.view(), heads, scaling);
    auto ref = [&](const std::vector<float>& in) {
      std::vector<double> o(in.begin(), in.end());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < D; ++i) {
            const int64_t at = n * ld + begin + h * D + i;
            if (i >= R) continue;
            const int64_t j = i % (R / 2);
            const double a = double(float(pos[n]) * inv[j]);
            const double rot = i < R / 2 ? -in[at + R / 2] : in[at - R / 2];
            o[at] = scaling * (in[at] * std::cos(a) + rot * std::sin(a));
          }
      return o;
    };
    expect_close(to_vector(dxf.view()), ref(x), 1e-5, "rope forward");
    // Backward: the gradient of sum(rope(x) * r) with respect to x, in place.
    const auto r = random_values(N * ld, rng);
    auto dr = device_f32(r, {N, ld}, device());
    rope_backward(columns(dr.view(), begin, heads * D), dpos.view(), dinv.view(), heads, scaling);
    auto g = to_vector(dr.view());
    auto loss = [&]() {
      const auto o = ref(x);
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * r[i];
      return s;
    };
    expect_gradient(loss, x.data(), N * ld, g, 1e-3, "rope backward", 1e-2f, 120);
  }
}

TEST_P(DecoderOpsTest, GatedActivationsAndGradients) {
  const int64_t N = 4, F = 9;
  for (GluAct act : {GluAct::Silu, GluAct::GeluTanh, GluAct::GeluErf}) {
    auto gu = random_values(N * 2 * F, rng, -4, 4);
    auto act_ref = [&](double x) {
      if (act == GluAct::Silu) return x / (1 + std::exp(-x));
      if (act == GluAct::GeluErf) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    };
    auto ref = [&] {
      std::vector<double> o(N * F);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f)
          o[n * F + f] = act_ref(gu[n * 2 * F + f]) * gu[n * 2 * F + F + f];
      return o;
    };
    auto d = device_f32(gu, {N, 2 * F}, device());
    auto out = poisoned({N, F}, device());
    glu_forward(out.view(), d.view(), act);
    expect_close(to_vector(out.view()), ref(), 1e-5, "glu forward");
    const auto r = random_values(N * F, rng);
    auto dout = device_f32(r, {N, F}, device());
    auto dgu = poisoned({N, 2 * F}, device());
    glu_backward(dgu.view(), d.view(), dout.view(), act);
    auto loss = [&]() {
      const auto o = ref();
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * r[i];
      return s;
    };
    expect_gradient(loss, gu.data(), N * 2 * F, to_vector(dgu.view()), 1e-3, "glu", 1e-3f, 80);
  }
  EXPECT_EQ(glu_act_from_hf("silu", "k"), GluAct::Silu);
  EXPECT_EQ(glu_act_from_hf("gelu_pytorch_tanh", "k"), GluAct::GeluTanh);
  EXPECT_THROW(glu_act_from_hf("relu2", "config.json: hidden_act"), InputError);
}

// 16-bit storage: the same bits as casting gu (and dout) to f32, running the f32 op and rounding
// the result once, for bf16 and f16, with dout in f32 (the decoder's) or in gu's type; a dtype
// mix the op does not take is refused.
TEST_P(DecoderOpsTest, GatedActivationsIn16BitStorageRoundOnce) {
  const int64_t N = 5, F = 7;
  auto typed = [&](const TensorView& f32, DType dtype) {
    auto t = zeros(f32.shape, device(), dtype);
    cast(t.view(), f32);
    return t;
  };
  auto as_f32 = [&](const TensorView& t) {
    auto f = zeros(t.shape, device());
    cast(f.view(), t);
    return to_vector(f.view());
  };
  for (DType dtype : {DType::BF16, DType::F16})
    for (GluAct act : {GluAct::Silu, GluAct::GeluTanh}) {
      const std::string what = std::string(dtype_name(dtype)) + (act == GluAct::Silu ? " silu" : " gelu");
      auto gu32 = device_f32(random_values(N * 2 * F, rng, -4, 4), {N, 2 * F}, device());
      auto gu = typed(gu32.view(), dtype);
      auto gu_rounded = zeros({N, 2 * F}, device());
      cast(gu_rounded.view(), gu.view());  // the 16-bit values, exactly, in f32
      // Forward: f32 op on the rounded values, rounded once = the 16-bit op.
      auto want32 = zeros({N, F}, device());
      glu_forward(want32.view(), gu_rounded.view(), act);
      auto out = typed(want32.view(), dtype);  // overwritten below; typed only for its dtype
      glu_forward(out.view(), gu.view(), act);
      EXPECT_EQ(as_f32(out.view()), as_f32(typed(want32.view(), dtype).view())) << what;
      // Backward, dout in f32 and in gu's type.
      auto dout32 = device_f32(random_values(N * F, rng), {N, F}, device());
      for (bool dout16 : {false, true}) {
        auto dout = typed(dout32.view(), dout16 ? dtype : DType::F32);
        auto dout_rounded = zeros({N, F}, device());
        cast(dout_rounded.view(), dout.view());
        auto dgu32 = zeros({N, 2 * F}, device());
        glu_backward(dgu32.view(), gu_rounded.view(), dout_rounded.view(), act);
        auto dgu = typed(gu32.view(), dtype);
        glu_backward(dgu.view(), gu.view(), dout.view(), act);
        EXPECT_EQ(as_f32(dgu.view()), as_f32(typed(dgu32.view(), dtype).view()))
            << what << (dout16 ? " dout 16-bit" : " dout f32");
      }
      // out must be gu's type; dout f32 or gu's.
      auto out32 = zeros({N, F}, device());
      EXPECT_THROW(glu_forward(out32.view(), gu.view(), act), ShapeError);
      const DType other = dtype == DType::BF16 ? DType::F16 : DType::BF16;
      auto dout_other = typed(dout32.view(), other);
      auto dgu = typed(gu32.view(), dtype);
      EXPECT_THROW(glu_backward(dgu.view(), gu.view(), dout_other.view(), act), ShapeError);
    }
}

// HF: last_non_pad = argmax_t(t * (ids[t] != pad)) per row.
std::vector<int32_t> hf_last(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t pad) {
  std::vector<int32_t> idx(B);
  for (int64_t b = 0; b < B; ++b) {
    int64_t best = 0, arg = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t v = pad < 0 ? t : t * (ids[b * T + t] != pad);
      if (v > best) best = v, arg = t;
    }
    idx[b] = static_cast<int32_t>(b * T + (pad < 0 ? T - 1 : arg));
  }
  return idx;
}

TEST_P(DecoderOpsTest, LastTokenPoolingFollowsHfOnEveryPadding) {
  const int64_t B = 5, T = 6, C = 3;
  const int32_t pad = 0, eos = 2;
  // right padded; right padded with pad == eos (a real trailing eos is skipped, as HF does);
  // left padded; all padding; no padding.
  const std::vector<int32_t> ids = {5, 6, 7, 0, 0, 0,   5, 6, 7, 8, 0, 0,  0, 0, 5, 6, 7, 8,
                                    0, 0, 0, 0, 0, 0,   9, 9, 9, 9, 9, 9};
  for (int64_t pad_id : {int64_t{pad}, int64_t{-1}}) {
    auto hidden = random_values(B * T * C, rng);
    auto dh = device_f32(hidden, {B, T, C}, device());
    auto di = device_i32(ids, {B * T}, device());
    auto out = poisoned({B, C}, device());
    auto index = zeros({B}, device(), DType::I32);
    last_token_forward(out.view(), index.view(), dh.view(), di.view(), {B, T, {}}, pad_id);
    const auto want = hf_last(ids, B, T, pad_id);
    const auto got_idx = ints(index.view());
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_EQ(got_idx[b], want[b]) << "row " << b << " pad " << pad_id;
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(to_vector(out.view())[b * C + c], hidden[want[b] * C + c]);
    }
    const auto r = random_values(B * C, rng);
    auto dout = device_f32(r, {B, C}, device());
    auto dhid = poisoned({B, T, C}, device());
    last_token_backward(dhid.view(), dout.view(), index.view());
    const auto g = to_vector(dhid.view());
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t c = 0; c < C; ++c) {
        double w = 0;
        for (int64_t b = 0; b < B; ++b)
          if (want[b] == n) w += r[b * C + c];
        EXPECT_EQ(g[n * C + c], w);
      }
  }
  // pad == eos: a right-padded row "a b eos eos eos" pools b, the token before its eos.
  const std::vector<int32_t> eos_ids = {5, 6, eos, eos, eos, eos};
  EXPECT_EQ(hf_last(eos_ids, 1, T, eos)[0], 1);
  auto dh = device_f32(random_values(T * C, rng), {T, C}, device());
  auto di = device_i32(eos_ids, {T}, device());
  auto out = poisoned({1, C}, device());
  auto index = zeros({1}, device(), DType::I32);
  last_token_forward(out.view(), index.view(), dh.view(), di.view(), {1, T, {}}, eos);
  EXPECT_EQ(ints(index.view())[0], 1);
}

TEST_P(DecoderOpsTest, PackedRowsPoolAsTheirPaddedForm) {
  // Rows of 3, 4 and 2 real tokens (one ending in pad == eos), packed back to back.
  const int32_t pad = 2;
  const std::vector<int32_t> packed = {5, 6, 7, 8, 9, 10, pad, 11, 12};
  const std::vector<int32_t> cu = {0, 3, 7, 9};
  const int64_t C = 4, N = 9, B = 3;
  auto hidden = random_values(N * C, rng);
  auto dh = device_f32(hidden, {N, C}, device());
  auto di = device_i32(packed, {N}, device());
  auto dcu = device_i32(cu, {B + 1}, device());
  auto out = poisoned({B, C}, device());
  auto index = zeros({B}, device(), DType::I32);
  LastTokenRows rows;
  rows.B = B;
  rows.cu_seqlens = dcu.view();
  last_token_forward(out.view(), index.view(), dh.view(), di.view(), rows, pad);
  const auto idx = ints(index.view());
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 5);  // the trailing pad id (eos) is skipped, as padded
  EXPECT_EQ(idx[2], 8);
}

TEST_P(DecoderOpsTest, ScaleMultipliesEveryElementOnce) {
  const int64_t n = 1027;  // not a multiple of a block
  const auto x = random_values(n, rng);
  auto t = device_f32(x, {n}, device());
  const float alpha = std::sqrt(48.0f);  // Gemma's embedding scale
  scale_inplace(t.view(), alpha);
  const auto y = to_vector(t.view());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], x[i] * alpha) << i;
}

FTUNE_INSTANTIATE_DEVICES(DecoderOpsTest);

}  // namespace
}  // namespace ftune::test
