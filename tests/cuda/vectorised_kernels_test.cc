// The vectorised CUDA elementwise kernels (cuda/vec.cuh: 128-bit loads and stores when every
// pointer is 16-byte aligned, element by element otherwise and for the tail): cast, GELU forward
// and backward, the mixed-type residual add, layer norm forward (with its 16-bit copy and the fused
// add) and its input gradient, AdamW (with a shadow of a sub-range) and the embedding lookup. Each
// runs on aligned views (the vector path), on views shifted by one element (misaligned: the scalar
// path) and by 16 bytes (aligned again), over sizes that are and are not multiples of the vector
// width; results must be the same bits on every placement, and equal to an exact host reference
// where the op is exact (casts, adds, copies). GPU only: skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/device.h"
#include "core/memory.h"
#include "models/param_table.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/layer_norm.h"
#include "ops/residual.h"
#include "optim/adamw.h"
#include "optim/step_scalars.h"
#include "test_util.h"

namespace ftune::test {
namespace {

class VectorisedKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  }
  const Device gpu = Device::cuda(0);
  std::mt19937_64 rng{test_seed()};

  std::vector<float> random(int64_t n, float lo = -3.0f, float hi = 3.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  }
};

// Element offsets of a view inside its allocation: 0 and 4 keep f32 views 16-byte aligned (4 is
// a non-zero offset), 1 and 3 break the alignment for every type; 8 aligns 16-bit views again.
constexpr int64_t kOffsets[] = {0, 1, 3, 4, 8};
// Element counts: below, at and around the vector widths (4 floats, 8 16-bit values), and large
// ones with and without a tail.
constexpr int64_t kSizes[] = {1, 3, 4, 7, 8, 9, 15, 16, 17, 1027, 4096, 40963};

// A device buffer whose view of n elements of `dtype` starts `offset` elements in, filled with
// `values` rounded to dtype on the host; the bytes around the view are 0xA5.
struct Placed {
  std::unique_ptr<DeviceTensor> buf;
  TensorView view;
};

Placed place(const std::vector<float>& values, DType dtype, int64_t offset, Device dev,
             Shape shape = {}) {
  const int64_t n = static_cast<int64_t>(values.size());
  Placed p;
  p.buf = std::make_unique<DeviceTensor>(dev, dtype, Shape{n + offset + 8});
  HostTensor fill(dtype, p.buf->view().shape);
  std::memset(fill.view().data, 0xA5, fill.view().nbytes());
  for (int64_t i = 0; i < n; ++i) {
    void* at = static_cast<char*>(fill.view().data) + (offset + i) * dtype_size(dtype);
    if (dtype == DType::F32) std::memcpy(at, &values[i], 4);
    if (dtype == DType::BF16) *static_cast<bf16_t*>(at) = float_to_bf16(values[i]);
    if (dtype == DType::F16) *static_cast<f16_t*>(at) = float_to_f16(values[i]);
  }
  copy(p.buf->view(), fill.view());
  p.view = p.buf->view().flat_range(offset, n);
  if (shape.rank() > 0) p.view = p.view.reshape(shape);
  return p;
}

// The bytes of a view, and of its whole allocation (to see that nothing outside was written).
std::string bytes(TensorView v) {
  HostTensor h(v.dtype, v.shape);
  copy(h.view(), v);
  return std::string(static_cast<const char*>(h.view().data), h.view().nbytes());
}
std::string all_bytes(const Placed& p) {
  return bytes(p.buf->view());
}
bool untouched_outside(const Placed& p, int64_t offset) {
  const std::string b = all_bytes(p);
  const size_t es = dtype_size(p.view.dtype), lo = offset * es, hi = lo + p.view.numel() * es;
  for (size_t i = 0; i < b.size(); ++i)
    if ((i < lo || i >= hi) && static_cast<unsigned char>(b[i]) != 0xA5) return false;
  return true;
}

// The host value of float x stored as dtype, as raw bytes.
std::string stored(const std::vector<float>& x, DType dtype) {
  std::string out(x.size() * dtype_size(dtype), '\0');
  for (size_t i = 0; i < x.size(); ++i) {
    char* at = out.data() + i * dtype_size(dtype);
    if (dtype == DType::F32) std::memcpy(at, &x[i], 4);
    if (dtype == DType::BF16) {
      const bf16_t h = float_to_bf16(x[i]);
      std::memcpy(at, &h, 2);
    }
    if (dtype == DType::F16) {
      const f16_t h = float_to_f16(x[i]);
      std::memcpy(at, &h, 2);
    }
  }
  return out;
}

// x as stored in dtype and read back as fp32.
std::vector<float> rounded(const std::vector<float>& x, DType dtype) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    r[i] = dtype == DType::BF16  ? bf16_to_float(float_to_bf16(x[i]))
           : dtype == DType::F16 ? f16_to_float(float_to_f16(x[i]))
                                 : x[i];
  return r;
}

constexpr DType kTypes[] = {DType::F32, DType::BF16, DType::F16};

TEST_F(VectorisedKernels, CastIsExactOnEveryPlacement) {
  for (DType from : kTypes)
    for (DType to : kTypes)
      for (int64_t n : kSizes)
        for (int64_t oi : kOffsets)
          for (int64_t oo : {int64_t{0}, int64_t{1}, int64_t{8}}) {
            SCOPED_TRACE(std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)) + " n " +
                         std::to_string(n) + " offsets " + std::to_string(oi) + "," +
                         std::to_string(oo));
            const std::vector<float> x = rounded(random(n, -7e4f, 7e4f), from);
            Placed in = place(x, from, oi, gpu), out = place(std::vector<float>(n, 0.0f), to, oo,
                                                             gpu);
            cast(out.view, in.view);
            ASSERT_EQ(bytes(out.view), stored(x, to));
            ASSERT_TRUE(untouched_outside(out, oo));
          }
}

TEST_F(VectorisedKernels, GeluForwardAndBackwardGiveTheSameBitsOnEveryPlacement) {
  for (DType t : kTypes)
    for (GeluForm form : {GeluForm::Erf, GeluForm::Tanh})
      for (int64_t n : kSizes) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n) +
                     (form == GeluForm::Erf ? " erf" : " tanh"));
        const std::vector<float> x = random(n), dy = random(n);
        std::string fwd_ref, bwd_ref;
        for (int64_t off : kOffsets) {
          SCOPED_TRACE(off);
          Placed in = place(x, t, off, gpu), d = place(dy, t, off, gpu),
                 y = place(std::vector<float>(n, 0.0f), t, off, gpu),
                 dx = place(std::vector<float>(n, 0.0f), t, off, gpu);
          gelu_forward(y.view, in.view, form);
          gelu_backward(dx.view, in.view, d.view, form);
          ASSERT_TRUE(untouched_outside(y, off));
          ASSERT_TRUE(untouched_outside(dx, off));
          if (off == 0) {
            fwd_ref = bytes(y.view);
            bwd_ref = bytes(dx.view);
            // The CPU's formula (fast_math on the CPU: close, not the same bits).
            const std::vector<float> xr = rounded(x, t);
            std::vector<float> cpu_y(n), cpu_dx(n);
            cpu::gelu_forward(cpu_y.data(), xr.data(), n, form);
            const std::vector<float> dyr = rounded(dy, t);
            cpu::gelu_backward(cpu_dx.data(), xr.data(), dyr.data(), n, form);
            Placed gy = place(std::vector<float>(n, 0.0f), DType::F32, 0, gpu);
            cast(gy.view, y.view);
            const std::vector<float> got = to_vector(gy.view);
            const double tol = t == DType::F32 ? 1e-5 : 1e-2;
            for (int64_t i = 0; i < n; ++i)
              ASSERT_NEAR(got[i], rounded({cpu_y[i]}, t)[0], tol * (1.0 + std::fabs(xr[i])))
                  << i;
          } else {
            ASSERT_EQ(bytes(y.view), fwd_ref);
            ASSERT_EQ(bytes(dx.view), bwd_ref);
          }
        }
      }
}

TEST_F(VectorisedKernels, MixedResidualIsExactOnEveryPlacement) {
  // (out, a, b): the encoder's bf16 sublayer output + fp32 stream, and the other mixes.
  const DType mixes[][3] = {{DType::F32, DType::BF16, DType::F32},
                            {DType::F32, DType::F16, DType::F32},
                            {DType::BF16, DType::BF16, DType::BF16},
                            {DType::BF16, DType::F32, DType::BF16},
                            {DType::F32, DType::F32, DType::F32}};
  for (const auto& mix : mixes)
    for (int64_t n : kSizes)
      for (int64_t off : kOffsets) {
        SCOPED_TRACE(std::string(dtype_name(mix[0])) + "=" + std::string(dtype_name(mix[1])) + "+" +
                     std::string(dtype_name(mix[2])) + " n " + std::to_string(n) + " offset " +
                     std::to_string(off));
        const std::vector<float> a = rounded(random(n), mix[1]), b = rounded(random(n), mix[2]);
        Placed pa = place(a, mix[1], off, gpu), pb = place(b, mix[2], (off * 3) % 9, gpu),
               out = place(std::vector<float>(n, 0.0f), mix[0], off, gpu);
        residual_forward(out.view, pa.view, pb.view);
        std::vector<float> sum(n);
        for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
        ASSERT_EQ(bytes(out.view), stored(sum, mix[0]));
        ASSERT_TRUE(untouched_outside(out, off));
      }
}

TEST_F(VectorisedKernels, LayerNormGivesTheSameBitsOnEveryPlacement) {
  const int64_t N = 5;
  for (int64_t C : {int64_t{384}, int64_t{768}, int64_t{1024}, int64_t{33}, int64_t{130}})
    for (bool fused : {false, true}) {
      SCOPED_TRACE("C " + std::to_string(C) + (fused ? " fused add" : ""));
      const std::vector<float> x = random(N * C), a = random(N * C), w = random(C), b = random(C),
                               dy = random(N * C);
      std::string ref_out, ref_h, ref_dx, ref_sum;
      for (int64_t off : kOffsets) {
        SCOPED_TRACE(off);
        const Shape NC{N, C};
        Placed px = place(x, DType::F32, off, gpu, NC), pa = place(a, DType::F32, off, gpu, NC),
               pw = place(w, DType::F32, off, gpu), pb = place(b, DType::F32, off, gpu),
               out = place(std::vector<float>(N * C, 0.0f), DType::F32, off, gpu, NC),
               sum = place(std::vector<float>(N * C, 0.0f), DType::F32, off, gpu, NC),
               out_h = place(std::vector<float>(N * C, 0.0f), DType::BF16, off, gpu, NC),
               mean = place(std::vector<float>(N, 0.0f), DType::F32, 0, gpu),
               rstd = place(std::vector<float>(N, 0.0f), DType::F32, 0, gpu),
               pdy = place(dy, DType::F32, off, gpu, NC),
               dx = place(std::vector<float>(N * C, 0.0f), DType::F32, off, gpu, NC);
        if (fused) {
          add_layer_norm_forward(out.view, sum.view, mean.view, rstd.view, px.view, pa.view,
                                 pw.view, pb.view, 1e-5f);
        } else {
          layer_norm_forward(out.view, mean.view, rstd.view, px.view, pw.view, pb.view, 1e-5f,
                             out_h.view);
          // The 16-bit copy is the rounding of the fp32 output, bit for bit.
          ASSERT_EQ(bytes(out_h.view), stored(to_vector(out.view), DType::BF16));
          ASSERT_TRUE(untouched_outside(out_h, off));
        }
        const TensorView normed = fused ? sum.view : px.view;
        layer_norm_backward(dx.view, TensorView(), TensorView(), pdy.view, normed, pw.view,
                            mean.view, rstd.view);
        ASSERT_TRUE(untouched_outside(out, off));
        ASSERT_TRUE(untouched_outside(dx, off));
        if (off == 0) {
          ref_out = bytes(out.view);
          ref_dx = bytes(dx.view);
          ref_sum = fused ? bytes(sum.view) : "";
          // Against the CPU kernel (its own summation order: close, not the same bits).
          std::vector<float> o(N * C), m(N), r(N), s(N * C);
          cpu::layer_norm_forward(o.data(), m.data(), r.data(), fused ? nullptr : x.data(),
                                  fused ? x.data() : nullptr, fused ? a.data() : nullptr,
                                  fused ? s.data() : nullptr, w.data(), b.data(), N, C, 1e-5f);
          const std::vector<float> got = to_vector(out.view);
          for (int64_t i = 0; i < N * C; ++i)
            ASSERT_NEAR(got[i], o[i], 1e-4 * (1.0 + std::fabs(o[i]))) << i;
        } else {
          ASSERT_EQ(bytes(out.view), ref_out);
          ASSERT_EQ(bytes(dx.view), ref_dx);
          if (fused) ASSERT_EQ(bytes(sum.view), ref_sum);
        }
      }
    }
}

TEST_F(VectorisedKernels, AdamWGivesTheSameBitsOnEveryPlacementAndItsShadowIsExact) {
  // Segments of sizes that are and are not multiples of 4: groups of four cross their bounds.
  ParamTable table;
  table.add("a.weight", Shape{37, 41});
  table.add("a.bias", Shape{2});
  table.add("b.weight", Shape{64, 16});
  table.add("b.bias", Shape{3});
  table.add("c.weight", Shape{9, 7});
  const int64_t n = table.total();
  const std::vector<float> p0 = random(n, -1.0f, 1.0f);
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < 3; ++t) grads.push_back(random(n, -1.0f, 1.0f));
  // (values / grads offset, shadow begin, shadow offset in its buffer)
  const int64_t placements[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1517, 0}, {0, 1516, 3},
                                   {3, 1516, 0}, {4, 40, 8}};
  std::string ref_p;
  for (DType st : {DType::BF16, DType::F16})
    for (const auto& pl : placements) {
      SCOPED_TRACE(std::string(dtype_name(st)) + " values offset " + std::to_string(pl[0]) +
                   " shadow begin " + std::to_string(pl[1]) + " shadow offset " +
                   std::to_string(pl[2]));
      AdamWOptions options;
      options.lr = 1e-2f;
      options.weight_decay = 0.1f;
      AdamW adam(table, options);
      ArenaPlan plan;
      adam.add_to_plan(plan);
      Arena arena(gpu, plan);
      adam.bind(arena);
      adam.set_lr_scale("b.weight", 0.5f);
      const int64_t shadow_begin = pl[1], shadow_count = n - shadow_begin - 5;
      Placed values = place(p0, DType::F32, pl[0], gpu),
             shadow = place(std::vector<float>(shadow_count, 0.0f), st, pl[2], gpu);
      for (int t = 0; t < 3; ++t) {
        Placed g = place(grads[t], DType::F32, pl[0], gpu);
        step_scalars_apply_unconditionally(adam.step_scalars(), 0.75f);
        adam.apply(values.view, g.view, 1e-2f, shadow.view, shadow_begin);
      }
      const std::vector<float> p = to_vector(values.view);
      if (ref_p.empty()) ref_p = bytes(values.view);
      ASSERT_EQ(bytes(values.view), ref_p);
      ASSERT_TRUE(untouched_outside(values, pl[0]));
      const std::vector<float> covered(p.begin() + shadow_begin,
                                       p.begin() + shadow_begin + shadow_count);
      ASSERT_EQ(bytes(shadow.view), stored(covered, st));
      ASSERT_TRUE(untouched_outside(shadow, pl[2]));
    }
  // The host-driven CPU optimizer on the same steps: close (the GPU may contract to FMA).
  AdamWOptions options;
  options.lr = 1e-2f;
  options.weight_decay = 0.1f;
  AdamW adam(table, options);
  ArenaPlan plan;
  plan.add_flat("values", DType::F32, n);
  plan.add_flat("grads", DType::F32, n);
  adam.add_to_plan(plan);
  Arena arena(Device::cpu(), plan);
  adam.bind(arena);
  adam.set_lr_scale("b.weight", 0.5f);
  copy(arena.view("values"), tensor_from(p0, Shape{n}).view());
  for (int t = 0; t < 3; ++t) {
    copy(arena.view("grads"), tensor_from(grads[t], Shape{n}).view());
    adam.step(arena.view("values"), arena.view("grads"), 1e-2f, 0.75f);
  }
  std::vector<float> gpu_p(n);
  std::memcpy(gpu_p.data(), ref_p.data(), ref_p.size());
  const std::vector<float> cpu_p = to_vector(arena.view("values"));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(gpu_p[i], cpu_p[i], 1e-6 * std::max(1.0f, std::fabs(cpu_p[i]))) << i;
}

TEST_F(VectorisedKernels, EmbeddingForwardIsExactOnEveryPlacement) {
  const int64_t V = 50, N = 37;
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  for (int64_t C : {int64_t{384}, int64_t{32}, int64_t{33}, int64_t{6}})
    for (int64_t off : kOffsets)
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE("C " + std::to_string(C) + " offset " + std::to_string(off) +
                     (accumulate ? " +=" : ""));
        std::vector<int32_t> ids(N);
        for (int32_t& id : ids) id = pick(rng);
        const std::vector<float> table = random(V * C), init = random(N * C);
        Placed pt = place(table, DType::F32, off, gpu, Shape{V, C}),
               out = place(init, DType::F32, off, gpu, Shape{N, C});
        DeviceTensor pid = device_i32(ids, Shape{N}, gpu);
        embedding_forward(out.view, pid.view(), pt.view, accumulate);
        std::vector<float> expect(N * C);
        for (int64_t r = 0; r < N; ++r)
          for (int64_t c = 0; c < C; ++c)
            expect[r * C + c] = accumulate ? init[r * C + c] + table[ids[r] * C + c]
                                           : table[ids[r] * C + c];
        ASSERT_EQ(bytes(out.view), stored(expect, DType::F32));
        ASSERT_TRUE(untouched_outside(out, off));
      }
}

}  // namespace
}  // namespace ftune::test
