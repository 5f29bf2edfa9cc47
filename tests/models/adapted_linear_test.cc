// The adapted linear layer block (models/layers/adapted_linear.h) against a double-precision
// reference, on the CPU: a plain linear (its GEMM reads gemm_weight / gemm_bias; a trained base
// gets dW += dy^T x and db += sum dy, a frozen one none; the guard skips a backward nobody wants),
// LoRA on a frozen and on a trained base (y = x W^T + b + s (x A^T) B^T; dx, dA, dB and the base's
// gradients), a slot without an adapter running the plain linear, and the adapter buffers planned
// by models/layers/adapter_buffers.h (u and z per site, z for DoRA only, the widest staging).
#include <gtest/gtest.h>

#include <random>

#include "core/arena.h"
#include "models/layers/adapted_linear.h"
#include "models/layers/adapter_buffers.h"
#include "ops/op_test_util.h"

// A named namespace: the test files of a group compile as one unit (tests/CMakeLists.txt).
namespace ftune::test::adapted_linear_block {

using Vec = std::vector<double>;
constexpr int64_t N = 5, C = 4, OC = 3, R = 2;
constexpr float kScale = 1.5f;

struct Values {
  std::vector<float> x, w, b, a, bb, dy;
};

Values random_values_set(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto rnd = [&](int64_t n) { return random_values(n, rng); };
  return Values{rnd(N * C), rnd(OC * C), rnd(OC), rnd(R * C), rnd(OC * R), rnd(N * OC)};
}

// y = x W^T + b (+ s (x A^T) B^T with lora) and the gradients of sum(y * dy).
struct Reference {
  Vec y, dx, dw, db, da, dbb;
};

Reference reference(const Values& v, bool lora) {
  Reference f;
  f.y.assign(N * OC, 0.0), f.dx.assign(N * C, 0.0), f.dw.assign(OC * C, 0.0);
  f.db.assign(OC, 0.0), f.da.assign(R * C, 0.0), f.dbb.assign(OC * R, 0.0);
  const float s = lora ? kScale : 0.0f;
  Vec u(N * R, 0.0), du(N * R, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < R; ++k)
      for (int64_t c = 0; c < C; ++c) u[n * R + k] += double(v.x[n * C + c]) * v.a[k * C + c];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double y = v.b[o];
      for (int64_t c = 0; c < C; ++c) y += double(v.x[n * C + c]) * v.w[o * C + c];
      for (int64_t k = 0; k < R; ++k) y += s * u[n * R + k] * v.bb[o * R + k];
      f.y[n * OC + o] = y;
      const double g = v.dy[n * OC + o];
      f.db[o] += g;
      for (int64_t c = 0; c < C; ++c) {
        f.dx[n * C + c] += g * v.w[o * C + c];
        f.dw[o * C + c] += g * v.x[n * C + c];
      }
      for (int64_t k = 0; k < R; ++k) {
        f.dbb[o * R + k] += s * g * u[n * R + k];
        du[n * R + k] += s * g * v.bb[o * R + k];
      }
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < R; ++k)
      for (int64_t c = 0; c < C; ++c) {
        f.da[k * C + c] += du[n * R + k] * v.x[n * C + c];
        f.dx[n * C + c] += du[n * R + k] * v.a[k * C + c];
      }
  return f;
}

Vec minus_one(const std::vector<float>& got) {  // gradients accumulate onto 1
  Vec v(got.begin(), got.end());
  for (double& e : v) e -= 1.0;
  return v;
}

std::vector<float> ones(int64_t n) {
  return std::vector<float>(n, 1.0f);
}

// One run of the block: `lora` puts an adapter on (layer 0, kind 1); `trained` gives the base
// gradients.
void run_block(bool lora, bool trained) {
  SCOPED_TRACE(::testing::Message() << "lora " << lora << " trained " << trained);
  const Values v = random_values_set(lora * 2 + trained + 7);
  const Reference ref = reference(v, lora);
  HostTensor x = tensor_from(v.x, {N, C}), w = tensor_from(v.w, {OC, C}), b = tensor_from(v.b, {OC});
  HostTensor a = tensor_from(v.a, {R, C}), bb = tensor_from(v.bb, {OC, R});
  HostTensor dw = tensor_from(ones(OC * C), {OC, C}), db = tensor_from(ones(OC), {OC});
  HostTensor da = tensor_from(ones(R * C), {R, C}), dbb = tensor_from(ones(OC * R), {OC, R});
  HostTensor u = poisoned_tensor({N, R}), h = poisoned_tensor({N, R});
  AdapterSet ad, grads;
  if (lora) {
    ad.scale = kScale, ad.r = R;
    ad.layers = {{AdapterWeights{}, AdapterWeights{a.view(), bb.view(), {}, {}, {}}}};
    grads = ad;
    grads.layers[0][1] = AdapterWeights{da.view(), dbb.view(), {}, {}, {}};
  }
  LinearParams p{w.view(), b.view(), w.view(), b.view(), {}, {}};
  if (trained) p.weight_grad = dw.view(), p.bias_grad = db.view();
  AdapterPass pass{&ad, &grads, AdapterScratch{h.view(), {}, {}, {}, {}}, DropoutPlan{}};
  const AdaptedLinear block(p, pass, AdapterSlot{0, 1, {u.view(), {}}, 0, {}});
  EXPECT_EQ(block.adapted(), lora);
  EXPECT_FALSE(block.dora());

  HostTensor y = poisoned_tensor({N, OC});
  block.forward(y.view(), x.view());
  expect_close(to_vector(y.view()), ref.y, 1e-5, "y");

  HostTensor dy = tensor_from(v.dy, {N, OC}), dx = poisoned_tensor({N, C});
  block.backward(dy.view(), x.view(), dx.view());
  expect_close(to_vector(dx.view()), ref.dx, 1e-5, "dx");
  if (trained) {
    expect_close(minus_one(to_vector(dw.view())), ref.dw, 1e-5, "dW");
    expect_close(minus_one(to_vector(db.view())), ref.db, 1e-5, "db");
  } else {
    EXPECT_EQ(to_vector(dw.view()), ones(OC * C));  // frozen: untouched
  }
  if (lora) {
    expect_close(minus_one(to_vector(da.view())), ref.da, 1e-5, "dA");
    expect_close(minus_one(to_vector(dbb.view())), ref.dbb, 1e-5, "dB");
  }
}

TEST(AdaptedLinear, PlainLinearOnAFrozenBase) { run_block(false, false); }
TEST(AdaptedLinear, PlainLinearOnATrainedBase) { run_block(false, true); }
TEST(AdaptedLinear, LoraOnAFrozenBase) { run_block(true, false); }
TEST(AdaptedLinear, LoraOnATrainedBase) { run_block(true, true); }

TEST(AdaptedLinear, GemmReadsItsOwnWeightAndBiasAndTheGuardSkipsAnUnwantedBackward) {
  const Values v = random_values_set(3);
  HostTensor x = tensor_from(v.x, {N, C}), w = tensor_from(v.w, {OC, C}), b = tensor_from(v.b, {OC});
  HostTensor zero_w = tensor_from(std::vector<float>(OC * C, 0.0f), {OC, C});
  // The GEMM reads gemm_weight / gemm_bias (a shadow), not the master weight.
  const AdaptedLinear block(LinearParams{zero_w.view(), {}, w.view(), b.view(), {}, {}});
  HostTensor y = poisoned_tensor({N, OC});
  block.forward(y.view(), x.view());
  expect_close(to_vector(y.view()), reference(v, false).y, 1e-5, "y");
  // y_has_base: an unadapted block leaves a fused GEMM's output as it is.
  HostTensor y2 = tensor_from(ones(N * OC), {N, OC});
  block.forward(y2.view(), x.view(), x.view(), /*y_has_base=*/true);
  EXPECT_EQ(to_vector(y2.view()), ones(N * OC));
  // Nothing wanted (frozen, no dx): with the guard nothing runs; dy stays as it was.
  HostTensor dy = tensor_from(v.dy, {N, OC});
  block.backward(dy.view(), x.view(), x.view(), TensorView(), false, /*guard=*/true);
  EXPECT_EQ(to_vector(dy.view()), v.dy);
}

TEST(AdaptedLinear, ASlotWithoutAnAdapterRunsThePlainLinear) {
  const Values v = random_values_set(4);
  HostTensor x = tensor_from(v.x, {N, C}), w = tensor_from(v.w, {OC, C}), b = tensor_from(v.b, {OC});
  HostTensor a = tensor_from(v.a, {R, C}), bb = tensor_from(v.bb, {OC, R});
  AdapterSet ad;
  ad.scale = kScale, ad.r = R;
  ad.layers = {{AdapterWeights{a.view(), bb.view(), {}, {}, {}}, AdapterWeights{}}};
  AdapterPass pass{&ad, nullptr, {}, DropoutPlan{}};
  const LinearParams p{w.view(), b.view(), w.view(), b.view(), {}, {}};
  EXPECT_TRUE(AdaptedLinear(p, pass, AdapterSlot{0, 0, {}, 0, {}}).adapted());
  EXPECT_FALSE(AdaptedLinear(p, pass, AdapterSlot{0, 1, {}, 0, {}}).adapted());
  EXPECT_FALSE(AdaptedLinear(p, pass, AdapterSlot{1, 0, {}, 0, {}}).adapted());  // past the layers
  AdapterPass none;
  EXPECT_FALSE(AdaptedLinear(p, none, AdapterSlot{0, 0, {}, 0, {}}).adapted());
}

TEST(AdapterBuffers, SiteBuffersZForDoraOnlyAndTheWidestStaging) {
  AdapterConfig lora;
  lora.method = PeftMethod::Lora;
  lora.r = 3;
  AdapterConfig dora = lora;
  dora.method = PeftMethod::Dora;
  dora.dropout = 0.1;
  for (const AdapterConfig* cfg : {&lora, &dora}) {
    BufferTable t;
    AdapterSiteBuffers l0, l1;
    AdapterScratch scratch;
    add_adapter_site_buffers(t, "u", "z", 7, 5, *cfg, {&l0, &l1});
    add_adapter_h(t, "h", 7, *cfg, scratch);
    add_adapter_dropout(t, "drop", {7, 5}, *cfg, scratch);
    add_adapter_stages(t, "s/", {{10, 20, 0}, {30, 5, 0}, {0, 0, 40}}, /*training=*/false, scratch);
    ArenaPlan plan;
    t.plan(plan);
    Arena arena(Device::cpu(), std::move(plan));
    t.bind(arena);
    EXPECT_EQ(l0.u.shape, (Shape{7, 3}));
    EXPECT_EQ(l0.u.data, l1.u.data);  // layers sharing a slot share the buffers
    EXPECT_EQ(l0.z.defined(), cfg->dora());
    if (cfg->dora()) EXPECT_EQ(l1.z.shape, (Shape{7, 5}));
    EXPECT_EQ(scratch.h.shape, (Shape{7, 3}));
    EXPECT_EQ(scratch.dropout.defined(), cfg->dropout > 0);
    EXPECT_EQ(scratch.stage_x.numel(), 30);
    EXPECT_EQ(scratch.stage_y.numel(), 20);
    EXPECT_FALSE(scratch.stage_dx.defined());  // dx staging in training only
    EXPECT_TRUE(t.contains("s/lora_stage_x"));
  }
}

}  // namespace ftune::test::adapted_linear_block
