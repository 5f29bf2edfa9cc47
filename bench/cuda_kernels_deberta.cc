// cuda_kernels_bench's DeBERTa part: the disentangled attention (ops/disentangled_attention.h) at
// DeBERTa-v3-base shapes (12 heads of 64, 256 position buckets, max_relative_positions 512, c2p +
// p2c), 32 x 128 and 8 x 512 tokens: the fp32 fused kernel ("after") against the first, unfused
// one (bench/disentangled_unfused_old.cu, "before"), and the bf16 tensor-core kernel ("after")
// against the fp32 fused one ("before"), forward and backward, 12 calls of each per training
// step. Before timing, each is checked against the CPU reference (2 rows of each length, the
// second padded, dropout 0.1; for bf16 the fp32 reference on the same bf16 values), and each
// fused backward for identical bits on a rerun. Without a GPU: the op alone on the CPU at a small
// shape, as a smoke run.
#include "cuda_kernels_deberta.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/gpu_paths.h"
#include "core/memory.h"
#include "device_timing.h"
#include "ops/cast.h"
#include "ops/disentangled_attention.h"

#ifdef FTUNE_BENCH_OLD_KERNELS
#include "disentangled_unfused_old.h"
#endif

namespace ftune::bench_deberta {
namespace {

// A float (f32, bf16, f16) or i32 tensor on a device, filled from host values (rounded to its
// type) and read back as fp32.
struct DBuf {
  Device dev;
  TensorView v;
  size_t bytes;
  DBuf(Device d, DType t, Shape s) : dev(d), bytes(static_cast<size_t>(s.numel()) * dtype_size(t)) {
    v = TensorView(device_malloc(dev, bytes), t, dev, s);
  }
  DBuf(Device d, const std::vector<float>& x, Shape s, DType t = DType::F32) : DBuf(d, t, s) {
    put(x);
  }
  DBuf(Device d, const std::vector<int32_t>& x, Shape s) : DBuf(d, DType::I32, s) {
    HostTensor h(v.dtype, v.shape);
    std::memcpy(h.view().data, x.data(), bytes);
    copy(v, h.view());
  }
  ~DBuf() { device_free(dev, v.data, bytes); }
  DBuf(const DBuf&) = delete;
  void put(const std::vector<float>& x) {
    HostTensor f(DType::F32, v.shape), h(v.dtype, v.shape);
    std::memcpy(f.view().data, x.data(), x.size() * 4);
    cast(h.view(), f.view());
    copy(v, h.view());
  }
  std::vector<float> get() const {
    HostTensor h(v.dtype, v.shape), f(DType::F32, v.shape);
    copy(h.view(), v);
    cast(f.view(), h.view());
    const float* p = f.view().data_as<float>();
    return std::vector<float>(p, p + v.numel());
  }
};

using bench::time_call;

DisentangledSpec v3_base() {
  DisentangledSpec s;
  s.heads = 12, s.head_dim = 64, s.c2p = s.p2c = true;
  s.position_buckets = 256, s.max_relative_positions = 512;
  return s;
}

// One call's inputs and outputs on a device (B rows of T; the last `pad` tokens of the last row
// are padding).
// Every tensor but the mask, saved and the workspace of type st (as a bf16 DeBERTa passes them).
struct Run {
  DisentangledSpec s;
  int64_t B, T;
  DisentangledBuffers sizes;
  DBuf q, k, v, pk, pq, dout, mask, saved, ws, out, dq, dk, dv, dpk, dpq;
  DisentangledCall call;
  Run(Device dev, DisentangledSpec spec, int64_t b, int64_t t, int64_t pad, float p,
      std::mt19937& rng, DType st = DType::F32)
      : s(spec), B(b), T(t), sizes(disentangled_attention_buffers(spec, dev, b, t, true, st)),
        q(dev, rand(b * t * c(), rng), nc(), st), k(dev, rand(b * t * c(), rng), nc(), st),
        v(dev, rand(b * t * c(), rng), nc(), st), pk(dev, rand(r() * c(), rng), rc(), st),
        pq(dev, rand(r() * c(), rng), rc(), st), dout(dev, rand(b * t * c(), rng), nc(), st),
        mask(dev, mask_of(b, t, pad), Shape{b * t}), saved(dev, DType::F32, {sizes.saved}),
        ws(dev, DType::F32, {sizes.workspace}), out(dev, st, nc()), dq(dev, st, nc()),
        dk(dev, st, nc()), dv(dev, st, nc()), dpk(dev, st, rc()), dpq(dev, st, rc()) {
    call.spec = s;
    call.batch = B;
    call.seq = T;
    call.key_mask = mask.v;
    call.dropout_p = p;
    call.rng = RngKey{2024, 3, 1};
    call.workspace = ws.v;
  }
  int64_t c() const { return s.heads * s.head_dim; }
  int64_t r() const { return 2 * s.span(); }
  Shape nc() const { return {B * T, c()}; }
  Shape rc() const { return {r(), c()}; }
  static std::vector<float> rand(int64_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(n);
    for (float& e : x) e = u(rng);
    return x;
  }
  static std::vector<int32_t> mask_of(int64_t B, int64_t T, int64_t pad) {
    std::vector<int32_t> m(B * T, 1);
    for (int64_t t = T - pad; t < T; ++t) m[(B - 1) * T + t] = 0;
    return m;
  }
  void forward() {
    disentangled_attention_forward(call, out.v, saved.v, q.v, k.v, v.v, pk.v, pq.v);
  }
  void backward() {
    disentangled_attention_backward(call, dq.v, dk.v, dv.v, dpk.v, dpq.v, dout.v, q.v, k.v, v.v,
                                    pk.v, pq.v, saved.v);
  }
  // The same values in another run (same shapes; through the host when the types differ).
  void copy_inputs_from(const Run& o) {
    for (auto [dst, src] : {std::pair<DBuf*, const DBuf*>{&q, &o.q}, {&k, &o.k}, {&v, &o.v},
                            {&pk, &o.pk}, {&pq, &o.pq}, {&dout, &o.dout}, {&mask, &o.mask}}) {
      if (dst->v.dtype == src->v.dtype && dst->v.device == src->v.device)
        copy(dst->v, src->v);
      else
        dst->put(src->get());
    }
  }
};

#ifdef FTUNE_BENCH_OLD_KERNELS
// The unfused kernels' resolved arguments (what ops/disentangled_attention.cc builds), with the
// relative-index table in `index` on the device.
struct Unfused {
  DisentangledArgs a;
  DBuf index, probs, dS;
  Unfused(const Run& r)
      : index(r.q.dev, table(r.s, r.T), Shape{2 * r.T - 1}),
        probs(r.q.dev, DType::F32, {r.B * r.s.heads * r.T * r.T}),
        dS(r.q.dev, DType::F32, {r.B * r.s.heads * r.T * r.T}) {
    a.spec = r.s;
    a.scale = r.s.scale();
    a.B = r.B, a.T = r.T;
    a.key_mask = r.mask.v.data_as<int32_t>();
    a.rel_index = index.v.data_as<int32_t>();
    a.rlo = deberta_relative_index(r.s, -(r.T - 1));
    a.rhi = deberta_relative_index(r.s, r.T - 1) + 1;
    a.ldq = a.ldk = a.ldv = a.ldo = a.ldpk = a.ldpq = r.c();
    a.lddq = a.lddk = a.lddv = a.lddpk = a.lddpq = r.c();
    a.dropout_p = r.call.dropout_p;
    a.rng = r.call.rng;
    a.Tv = r.T;
  }
  static std::vector<int32_t> table(const DisentangledSpec& s, int64_t T) {
    std::vector<int32_t> t(2 * T - 1);
    for (int64_t d = 0; d < 2 * T - 1; ++d)
      t[d] = static_cast<int32_t>(deberta_relative_index(s, d - (T - 1)));
    return t;
  }
  void forward(Run& r) {
    bench_old::disentangled_forward_unfused(a, r.out.v.data_as<float>(), probs.v.data_as<float>(),
                                            r.q.v.data_as<float>(), r.k.v.data_as<float>(),
                                            r.v.v.data_as<float>(), r.pk.v.data_as<float>(),
                                            r.pq.v.data_as<float>());
  }
  void backward(Run& r) {
    bench_old::disentangled_backward_unfused(
        a, r.dq.v.data_as<float>(), r.dk.v.data_as<float>(), r.dv.v.data_as<float>(),
        r.dpk.v.data_as<float>(), r.dpq.v.data_as<float>(), r.dout.v.data_as<float>(),
        r.q.v.data_as<float>(), r.k.v.data_as<float>(), r.v.v.data_as<float>(),
        r.pk.v.data_as<float>(), r.pq.v.data_as<float>(), probs.v.data_as<float>(),
        dS.v.data_as<float>());
  }
};
#endif

// Worst |got - want| / (1 + |want|) over the outputs; prints one line, returns 1 on a failure.
int check(const std::string& what, Run& got, Run& want, double tol) {
  double worst = 0;
  std::string where = "-";
  for (auto [name, g, w] : {std::tuple<const char*, DBuf*, DBuf*>{"out", &got.out, &want.out},
                            {"dq", &got.dq, &want.dq}, {"dk", &got.dk, &want.dk},
                            {"dv", &got.dv, &want.dv}, {"dpos_key", &got.dpk, &want.dpk},
                            {"dpos_query", &got.dpq, &want.dpq}}) {
    const std::vector<float> x = g->get(), y = w->get();
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::abs(double(x[i]) - y[i]) / (1.0 + std::abs(y[i]));
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e, where = name;
    }
  }
  const bool ok = worst <= tol;
  std::printf("check %-58s %s: worst %.2e (%s), tolerance %.0e\n", what.c_str(),
              ok ? "ok" : "FAILED", worst, where.c_str(), tol);
  return ok ? 0 : 1;
}

int bits(const std::string& what, Run& a, Run& b) {
  bool same = true;
  for (auto [x, y] : {std::pair<DBuf*, DBuf*>{&a.dq, &b.dq}, {&a.dk, &b.dk}, {&a.dv, &b.dv},
                      {&a.dpk, &b.dpk}, {&a.dpq, &b.dpq}})
    same = same && x->get() == y->get();
  std::printf("check %-58s %s\n", what.c_str(), same ? "ok: bit-identical" : "FAILED: bits differ");
  return same ? 0 : 1;
}

}  // namespace

int run(Device dev, bool gpu, int reps) {
  const DisentangledSpec s = v3_base();
  std::mt19937 rng(19);
  int failures = 0;
  struct Size {
    int64_t B, T;
  };
  const std::vector<Size> sizes = gpu ? std::vector<Size>{{32, 128}, {8, 512}}
                                      : std::vector<Size>{{2, 64}};
  std::printf("\nDeBERTa-v3-base disentangled attention (12 x 64, 256 buckets, c2p + p2c), fp32 "
              "and bf16\n");
  for (const Size& z : sizes) {
    Run cpu_ref(Device::cpu(), s, 2, z.T, z.T / 3, 0.1f, rng);
    cpu_ref.forward();
    cpu_ref.backward();
    Run fused(dev, s, 2, z.T, z.T / 3, 0.1f, rng), again(dev, s, 2, z.T, z.T / 3, 0.1f, rng);
    fused.copy_inputs_from(cpu_ref);
    again.copy_inputs_from(cpu_ref);
    for (Run* r : {&fused, &again}) r->forward(), r->backward();
    failures += check(fmt::format("disentangled, 2 x {}: fused vs the CPU", z.T), fused, cpu_ref,
                      1e-4);
    failures += bits(fmt::format("disentangled, 2 x {}: fused backward rerun", z.T), fused, again);
    // bf16: the tensor-core kernel on a GPU (P and dS rounded to bf16 for their products, each
    // output rounded once), against the fp32 CPU reference on the same bf16 values.
    Run half(dev, s, 2, z.T, z.T / 3, 0.1f, rng, DType::BF16),
        half2(dev, s, 2, z.T, z.T / 3, 0.1f, rng, DType::BF16);
    Run half_ref(Device::cpu(), s, 2, z.T, z.T / 3, 0.1f, rng);
    half2.copy_inputs_from(half);
    half_ref.copy_inputs_from(half);
    const GpuPathCounts paths0 = gpu_path_counts();
    for (Run* r : {&half, &half2, &half_ref}) r->forward(), r->backward();
    if (gpu && (gpu_path_counts() - paths0)[GpuPath::DisentangledFused16] != 4) {
      std::printf("check %-58s FAILED: the bf16 runs did not take the tensor-core path\n",
                  "disentangled bf16 path");
      ++failures;
    }
    failures += check(fmt::format("disentangled, 2 x {}: bf16 vs the CPU", z.T), half, half_ref,
                      2e-2);
    failures += bits(fmt::format("disentangled, 2 x {}: bf16 backward rerun", z.T), half, half2);
#ifdef FTUNE_BENCH_OLD_KERNELS
    if (gpu) {
      Run old(dev, s, 2, z.T, z.T / 3, 0.1f, rng);
      old.copy_inputs_from(cpu_ref);
      Unfused u(old);
      u.forward(old);
      u.backward(old);
      failures += check(fmt::format("disentangled, 2 x {}: unfused vs the CPU", z.T), old,
                        cpu_ref, 1e-4);
    }
#endif
  }
  if (failures || reps <= 0) return failures;
  std::printf("%-46s %12s %12s %8s %6s\n", "kernel", gpu ? "before us" : "", "after us",
              gpu ? "speedup" : "", "/step");
  for (const Size& z : sizes) {
    Run r(dev, s, z.B, z.T, 0, 0.1f, rng);
    r.forward();
    const double fwd = time_call(dev, [&] { r.forward(); }, reps);
    const double bwd = time_call(dev, [&] { r.backward(); }, reps);
    double old_fwd = -1, old_bwd = -1;
#ifdef FTUNE_BENCH_OLD_KERNELS
    if (gpu) {
      Unfused u(r);
      old_fwd = time_call(dev, [&] { u.forward(r); }, reps);
      old_bwd = time_call(dev, [&] { u.backward(r); }, reps);
    }
#endif
    for (auto [name, before, after] :
         {std::tuple<const char*, double, double>{"forward", old_fwd, fwd},
          {"backward", old_bwd, bwd}}) {
      const std::string label = fmt::format("disentangled {}, {} x {}", name, z.B, z.T);
      if (before >= 0)
        std::printf("%-46s %12.1f %12.1f %7.2fx %6d\n", label.c_str(), before * 1e6, after * 1e6,
                    before / after, 12);
      else
        std::printf("%-46s %12s %12.1f %8s %6d\n", label.c_str(), "", after * 1e6, "", 12);
    }
    // bf16 against the fp32 fused kernel ("before"); gpu_paths tells which path ran.
    Run h(dev, s, z.B, z.T, 0, 0.1f, rng, DType::BF16);
    h.forward();
    const double hfwd = time_call(dev, [&] { h.forward(); }, reps);
    const double hbwd = time_call(dev, [&] { h.backward(); }, reps);
    for (auto [name, before, after] :
         {std::tuple<const char*, double, double>{"forward", fwd, hfwd}, {"backward", bwd, hbwd}}) {
      const std::string label = fmt::format("disentangled {} bf16, {} x {}", name, z.B, z.T);
      std::printf("%-46s %12.1f %12.1f %7.2fx %6d\n", label.c_str(), before * 1e6, after * 1e6,
                  before / after, 12);
    }
    if (gpu)
      std::printf("  saved per layer: %.1f MiB fused, %.1f MiB unfused (P); workspace %.1f MiB "
                  "fp32, %.1f MiB bf16\n",
                  r.sizes.saved * 4.0 / (1 << 20), z.B * s.heads * z.T * z.T * 4.0 / (1 << 20),
                  r.sizes.workspace * 4.0 / (1 << 20), h.sizes.workspace * 4.0 / (1 << 20));
  }
  return failures;
}

}  // namespace ftune::bench_deberta
