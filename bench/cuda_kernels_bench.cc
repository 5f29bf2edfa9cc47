// The CUDA kernels issue 25 rewrote, before and after, on the GPU at hand, at BERT-base training
// shapes (32 x 128 tokens by default): the embeddings' backward (token types: every id equal;
// positions: each id 32 times; words), the column sums of the backward pass (a linear layer's
// bias gradient from bf16 dout at the four widths of a layer; LayerNorm's weight and bias
// gradients), and the end of each sublayer (dropout + residual + LayerNorm, forward and backward:
// three passes or two before, one fused pass now). "before" runs the kernels as they were
// (bench/cuda_kernels_old.cu), "after" ftune's ops; both from the same buffers, after warm-up,
// timed over --reps calls with a device synchronisation around them. The last lines add the
// kernels up for one training step of a 12-layer model (3 embedding tables, 48 bias gradients,
// 25 LayerNorm weight gradients, 24 fused forward and backward ends). On a machine without a GPU
// it runs the same ops on the CPU at a small shape as a smoke test (no before/after) and says so.
//
// Before any timing it checks what it times, once, from fresh buffers, and exits with status 1
// if a check fails: the embeddings' backward (each table) and the bias gradient give the CPU
// twin's bits (the fixed orders of ops/embedding.h and core/column_order.h), LayerNorm's weight
// and bias gradients follow the CPU within float rounding (a product may be contracted
// differently), the old kernels agree with the new ones within rounding (they sum in another
// order), and the fused sublayer end gives its composition's bits forward and backward on the
// device. --check-only stops after the checks.
// Then DeBERTa-v3-base's disentangled attention, fused against unfused, checked likewise
// (bench/cuda_kernels_deberta.cc).
//
//   cuda_kernels_bench [--tokens 4096] [--hidden 768] [--seq 128] [--reps 20] [--check-only]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory.h"
#include "device_timing.h"
#include "ops/dropout.h"
#include "ops/dropout_add_norm.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/residual.h"

#include "cuda_kernels_deberta.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif
#ifdef FTUNE_BENCH_OLD_KERNELS
#include "cuda_kernels_old.h"
#endif

using namespace ftune;

namespace {

// A buffer of n random values of type t on `device` (ids: integers in [0, id_range)).
struct Buf {
  Device dev;
  TensorView v;
  size_t bytes;
  Buf(Device d, DType t, Shape s, std::mt19937& rng, int32_t id_range = 0)
      : dev(d), bytes(static_cast<size_t>(s.numel()) * dtype_size(t)) {
    HostTensor h(t, s);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < s.numel(); ++i) {
      if (t == DType::I32)
        h.data<int32_t>()[i] = id_range > 1 ? static_cast<int32_t>(rng() % id_range) : 0;
      else if (t == DType::F32)
        h.data<float>()[i] = u(rng);
      else if (t == DType::BF16)
        h.data<bf16_t>()[i] = float_to_bf16(u(rng));
    }
    v = TensorView(device_malloc(dev, bytes), t, dev, s);
    copy(v, h.view());
  }
  // A copy of `src` (any device, any type) on `d`.
  Buf(Device d, TensorView src)
      : dev(d), bytes(static_cast<size_t>(src.numel()) * dtype_size(src.dtype)) {
    v = TensorView(device_malloc(dev, bytes), src.dtype, dev, src.shape);
    copy(v, src);
  }
  ~Buf() { device_free(dev, v.data, bytes); }
  Buf(const Buf&) = delete;
};

using bench::sync;
using bench::time_call;

struct Row {
  std::string name;
  double before = -1, after = 0;  // seconds per call (before < 0: no old kernel)
  int per_step = 0;               // calls in one training step of the 12-layer model
};

void print(const std::vector<Row>& rows, bool gpu) {
  std::printf("%-46s %12s %12s %8s %6s\n", "kernel", gpu ? "before us" : "", "after us",
              gpu ? "speedup" : "", "/step");
  double step_before = 0, step_after = 0;
  for (const Row& r : rows) {
    if (r.before >= 0)
      std::printf("%-46s %12.1f %12.1f %7.2fx %6d\n", r.name.c_str(), r.before * 1e6,
                  r.after * 1e6, r.before / r.after, r.per_step);
    else
      std::printf("%-46s %12s %12.1f %8s %6d\n", r.name.c_str(), "", r.after * 1e6, "",
                  r.per_step);
    step_before += (r.before >= 0 ? r.before : r.after) * r.per_step;
    step_after += r.after * r.per_step;
  }
  if (gpu)
    std::printf("one training step's share of these kernels: %.3f ms before, %.3f ms after\n",
                step_before * 1e3, step_after * 1e3);
}

// The values of a tensor of any float type on any device, as floats on the host.
std::vector<float> host_floats(TensorView v) {
  HostTensor h(v.dtype, v.shape);
  copy(h.view(), v);
  std::vector<float> out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i)
    out[i] = v.dtype == DType::F32    ? h.data<float>()[i]
             : v.dtype == DType::BF16 ? bf16_to_float(h.data<bf16_t>()[i])
                                      : f16_to_float(h.data<f16_t>()[i]);
  return out;
}

std::string host_bytes(TensorView v) {
  HostTensor h(v.dtype, v.shape);
  copy(h.view(), v);
  return std::string(static_cast<const char*>(h.view().data),
                     static_cast<size_t>(v.numel()) * dtype_size(v.dtype));
}

// The correctness checks of the header comment; each prints one line. Returns the failures.
class Checks {
 public:
  int failures() const { return failures_; }

  // got and want equal bit for bit.
  void same_bits(const std::string& what, TensorView got, TensorView want) {
    const std::string a = host_bytes(got), b = host_bytes(want);
    if (a == b) return ok(what, "bit-identical");
    const std::vector<float> x = host_floats(got), y = host_floats(want);
    size_t bad = 0, first = x.size();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0 && !(std::isnan(x[i]) && std::isnan(y[i])))
        if (bad++ == 0) first = i;
    fail(what, first < x.size() ? fmt::format("{} of {} values differ in bits; first at {}: {} vs {}",
                                              bad, x.size(), first, x[first], y[first])
                                : std::string("the bytes differ"));
  }
  // |got - want| <= tol * (1 + |want|) everywhere.
  void close(const std::string& what, TensorView got, TensorView want, double tol) {
    const std::vector<float> x = host_floats(got), y = host_floats(want);
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::abs(static_cast<double>(x[i]) - y[i]) / (1.0 + std::abs(y[i]));
      if (!(e <= worst)) {  // NaN counts as worst
        worst = std::isnan(e) ? INFINITY : e;
        at = i;
      }
    }
    if (worst <= tol) return ok(what, fmt::format("within {:.1e} (tolerance {:.0e})", worst, tol));
    fail(what, fmt::format("relative error {:.3e} at {} ({} vs {}), tolerance {:.0e}", worst, at,
                           x[at], y[at], tol));
  }

 private:
  void ok(const std::string& what, const std::string& how) {
    std::printf("check %-58s ok: %s\n", what.c_str(), how.c_str());
  }
  void fail(const std::string& what, const std::string& why) {
    std::printf("check %-58s FAILED: %s\n", what.c_str(), why.c_str());
    ++failures_;
  }
  int failures_ = 0;
};

// Runs the checks at N tokens of C values (sequences of T); returns the failures.
int run_checks(Device dev, int64_t N, int64_t C, int64_t T, bool gpu) {
  const Device cpu = Device::cpu();
  const int64_t V = 30522, P = 512, F = 4 * C;
  std::mt19937 rng(11);
  Checks check;
  std::printf("checks on %s (reference: the CPU twin%s)\n", gpu ? "the GPU" : "the CPU",
              gpu ? "" : ", i.e. itself: a smoke run");

  // Embedding backward, every table: the CPU's bits, and the old kernel within rounding.
  {
    Buf dout(cpu, DType::F32, {N, C}, rng), types(cpu, DType::I32, {N}, rng, 0),
        words(cpu, DType::I32, {N}, rng, static_cast<int32_t>(V)), pos(cpu, DType::I32, {N}, rng);
    for (int64_t n = 0; n < N; ++n) pos.v.data_as<int32_t>()[n] = static_cast<int32_t>(n % T);
    struct Table {
      const char* name;
      Buf* ids;
      int64_t rows, padding;
    };
    for (const Table& t : {Table{"token types (all 0)", &types, 2, -1},
                           Table{"positions", &pos, P, -1}, Table{"words", &words, V, 0}}) {
      Buf init(cpu, DType::F32, {t.rows, C}, rng);
      Buf want(cpu, init.v), got(dev, init.v), d_dout(dev, dout.v), d_ids(dev, t.ids->v);
      Buf ws_cpu(cpu, DType::F32, {embedding_backward_workspace(cpu, N, C)}, rng),
          ws(dev, DType::F32, {embedding_backward_workspace(dev, N, C)}, rng);
      embedding_backward(want.v, dout.v, t.ids->v, t.padding, ws_cpu.v);
      embedding_backward(got.v, d_dout.v, d_ids.v, t.padding, ws.v);
      check.same_bits(fmt::format("embedding backward, {}: the CPU's bits", t.name), got.v,
                      want.v);
#ifdef FTUNE_BENCH_OLD_KERNELS
      if (gpu) {
        Buf old(dev, init.v);
        bench_old::embedding_backward(old.v.data_as<float>(), d_dout.v.data_as<float>(),
                                      d_ids.v.data_as<int32_t>(), N, C, t.padding);
        check.close(fmt::format("embedding backward, {}: the old kernel", t.name), old.v, want.v,
                    1e-5);
      }
#endif
    }
  }

  // Bias gradients from 16-bit dout (fp32 on the CPU smoke run): the CPU's bits on the same
  // values, accumulated into a gradient that already holds values.
  for (const int64_t OC : {3 * C, C, F}) {
    const DType t = gpu ? DType::BF16 : DType::F32;
    Buf dout16(cpu, t, {N, OC}, rng), x(cpu, DType::F32, {N, 1}, rng),
        w(cpu, DType::F32, {OC, 1}, rng), init(cpu, DType::F32, {OC}, rng);
    HostTensor dout32(DType::F32, {N, OC});
    const std::vector<float> values = host_floats(dout16.v);
    std::copy(values.begin(), values.end(), dout32.data<float>());
    Buf want(cpu, init.v), got(dev, init.v), d_dout(dev, dout16.v);
    // The GEMM's operands (unused without dinp and dweight) share dout's type.
    Buf d_x(dev, t, {N, 1}, rng), d_w(dev, t, {OC, 1}, rng);
    linear_backward(TensorView(), TensorView(), want.v, dout32.view(), x.v, w.v);
    linear_backward(TensorView(), TensorView(), got.v, d_dout.v, d_x.v, d_w.v);
    check.same_bits(fmt::format("bias gradient, {} x {}: the CPU's bits", N, OC), got.v, want.v);
#ifdef FTUNE_BENCH_OLD_KERNELS
    if (gpu) {
      Buf old(dev, init.v);
      bench_old::add_column_sums(old.v.data_as<float>(), d_dout.v.data, d_dout.v.dtype, OC, N, OC);
      check.close(fmt::format("bias gradient, {} x {}: the old kernel", N, OC), old.v, want.v,
                  1e-5);
    }
#endif
  }

  // LayerNorm's weight and bias gradients (and its input gradient): the CPU within rounding.
  {
    Buf x(cpu, DType::F32, {N, C}, rng), w(cpu, DType::F32, {C}, rng),
        bias(cpu, DType::F32, {C}, rng), dout(cpu, DType::F32, {N, C}, rng),
        out(cpu, DType::F32, {N, C}, rng), mean(cpu, DType::F32, {N}, rng),
        rstd(cpu, DType::F32, {N}, rng), gw0(cpu, DType::F32, {C}, rng),
        gb0(cpu, DType::F32, {C}, rng), dinp(cpu, DType::F32, {N, C}, rng);
    layer_norm_forward(out.v, mean.v, rstd.v, x.v, w.v, bias.v, 1e-12f);
    Buf gw(cpu, gw0.v), gb(cpu, gb0.v);
    layer_norm_backward(dinp.v, gw.v, gb.v, dout.v, x.v, w.v, mean.v, rstd.v);
    Buf d_x(dev, x.v), d_w(dev, w.v), d_dout(dev, dout.v), d_mean(dev, mean.v),
        d_rstd(dev, rstd.v), d_gw(dev, gw0.v), d_gb(dev, gb0.v), d_dinp(dev, dinp.v);
    layer_norm_backward(d_dinp.v, d_gw.v, d_gb.v, d_dout.v, d_x.v, d_w.v, d_mean.v, d_rstd.v);
    check.close("LayerNorm weight gradient: the CPU", d_gw.v, gw.v, 1e-5);
    check.close("LayerNorm bias gradient: the CPU", d_gb.v, gb.v, 1e-5);
    check.close("LayerNorm input gradient: the CPU", d_dinp.v, dinp.v, 1e-5);
#ifdef FTUNE_BENCH_OLD_KERNELS
    if (gpu) {
      Buf old_w(dev, gw0.v), old_b(dev, gb0.v);
      bench_old::layer_norm_params(old_w.v.data_as<float>(), old_b.v.data_as<float>(),
                                   d_dout.v.data_as<float>(), d_x.v.data_as<float>(),
                                   d_mean.v.data_as<float>(), d_rstd.v.data_as<float>(), N, C);
      check.close("LayerNorm weight gradient: the old kernel", old_w.v, gw.v, 1e-5);
      check.close("LayerNorm bias gradient: the old kernel", old_b.v, gb.v, 1e-5);
    }
#endif
  }

  // The fused sublayer end against its composition on the device, forward and backward.
  {
    const float p = 0.1f;
    const DType h = gpu ? DType::BF16 : DType::F32;
    const RngKey key{1234, 7, 1};
    const DropoutRows drop_rows{0, T, T};
    Buf a(dev, h, {N, C}, rng), b(dev, DType::F32, {N, C}, rng), w(dev, DType::F32, {C}, rng),
        bias(dev, DType::F32, {C}, rng), dout(dev, DType::F32, {N, C}, rng);
    Buf out1(dev, DType::F32, {N, C}, rng), sum1(dev, DType::F32, {N, C}, rng),
        mean1(dev, DType::F32, {N}, rng), rstd1(dev, DType::F32, {N}, rng),
        out1h(dev, DType::BF16, {N, C}, rng);
    Buf out2(dev, out1.v), sum2(dev, sum1.v), mean2(dev, mean1.v), rstd2(dev, rstd1.v),
        out2h(dev, out1h.v), dropped(dev, a.v);
    const TensorView h1 = gpu ? out1h.v : TensorView(), h2 = gpu ? out2h.v : TensorView();
    dropout_add_layer_norm_forward(out1.v, h1, sum1.v, mean1.v, rstd1.v, a.v, b.v, w.v, bias.v,
                                   1e-12f, p, key, drop_rows);
    dropout_forward(dropped.v, a.v, p, key, drop_rows);
    residual_forward(sum2.v, dropped.v, b.v);
    layer_norm_forward(out2.v, mean2.v, rstd2.v, sum2.v, w.v, bias.v, 1e-12f, h2);
    check.same_bits("dropout + residual + LayerNorm forward: out", out1.v, out2.v);
    check.same_bits("dropout + residual + LayerNorm forward: the sum", sum1.v, sum2.v);
    check.same_bits("dropout + residual + LayerNorm forward: mean", mean1.v, mean2.v);
    check.same_bits("dropout + residual + LayerNorm forward: rstd", rstd1.v, rstd2.v);
    if (gpu) check.same_bits("dropout + residual + LayerNorm forward: bf16 copy", h1, h2);
    Buf gw1(dev, DType::F32, {C}, rng), gb1(dev, DType::F32, {C}, rng);
    Buf gw2(dev, gw1.v), gb2(dev, gb1.v), dinp1(dev, DType::F32, {N, C}, rng),
        ddrop1(dev, h, {N, C}, rng);
    Buf dinp2(dev, dinp1.v), ddrop2(dev, ddrop1.v);
    layer_norm_dropout_backward(dinp1.v, ddrop1.v, gw1.v, gb1.v, dout.v, sum1.v, w.v, mean1.v,
                                rstd1.v, p, key, drop_rows);
    layer_norm_backward(dinp2.v, gw2.v, gb2.v, dout.v, sum1.v, w.v, mean1.v, rstd1.v);
    dropout_backward(ddrop2.v, dinp2.v, p, key, drop_rows);
    check.same_bits("LayerNorm + dropout backward: input gradient", dinp1.v, dinp2.v);
    check.same_bits("LayerNorm + dropout backward: dropout gradient", ddrop1.v, ddrop2.v);
    check.same_bits("LayerNorm + dropout backward: weight gradient", gw1.v, gw2.v);
    check.same_bits("LayerNorm + dropout backward: bias gradient", gb1.v, gb2.v);
  }
  sync(dev);
  if (check.failures() == 0)
    std::printf("checks: all passed\n");
  else
    std::printf("checks: %d FAILED\n", check.failures());
  return check.failures();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftune CUDA kernels before / after (issue 25), BERT-base shapes"};
  int64_t tokens = 4096, C = 768, T = 128;
  int reps = 20;
  bool check_only = false;
  app.add_option("--tokens", tokens, "rows (batch x sequence)");
  app.add_option("--hidden", C, "hidden size C (the FFN is 4 C)");
  app.add_option("--seq", T, "sequence length (position ids repeat every seq tokens)");
  app.add_option("--reps", reps, "timed calls per measurement");
  app.add_flag("--check-only", check_only, "run the correctness checks only (exit 1 on a failure)");
  CLI11_PARSE(app, argc, argv);
  bool gpu = false;
#ifdef FTUNE_WITH_CUDA
  gpu = cuda::device_count() > 0;
#endif
  Device dev = Device::cpu();
  if (gpu) {
    dev = Device::cuda(0);
  } else {
    std::printf("cuda_kernels_bench: no CUDA device here (or a build without CUDA): a CPU smoke "
                "run of the same ops at 256 x 64 tokens, no before/after numbers\n");
    tokens = 256;
    T = 64;
    C = 64;
    reps = 2;
  }
  if (run_checks(dev, tokens, C, T, gpu) != 0) return 1;
  if (check_only) return bench_deberta::run(dev, gpu, 0) == 0 ? 0 : 1;
  const int64_t N = tokens, F = 4 * C, V = 30522, P = 512;
  std::mt19937 rng(7);
  std::vector<Row> rows;

  // Embedding backward: token types (V = 2, all 0), positions (t % T), words (random).
  {
    Buf dout(dev, DType::F32, {N, C}, rng), type_ids(dev, DType::I32, {N}, rng, 0),
        words(dev, DType::I32, {N}, rng, static_cast<int32_t>(V)),
        dtype_(dev, DType::F32, {2, C}, rng), dpos(dev, DType::F32, {P, C}, rng),
        dword(dev, DType::F32, {V, C}, rng);
    HostTensor pos_host(DType::I32, {N});
    for (int64_t n = 0; n < N; ++n) pos_host.data<int32_t>()[n] = static_cast<int32_t>(n % T);
    Buf pos(dev, DType::I32, {N}, rng, 0);
    copy(pos.v, pos_host.view());
    Buf ws(dev, DType::F32, {embedding_backward_workspace(dev, N, C)}, rng);
    struct Table {
      const char* name;
      Buf* ids;
      Buf* table;
    };
    for (const Table& t : {Table{"embedding backward, token types (all 0)", &type_ids, &dtype_},
                           Table{"embedding backward, positions", &pos, &dpos},
                           Table{"embedding backward, words", &words, &dword}}) {
      Row r{t.name};
      r.per_step = 1;
      r.after = time_call(dev, [&] { embedding_backward(t.table->v, dout.v, t.ids->v, -1, ws.v); },
                          reps);
#ifdef FTUNE_BENCH_OLD_KERNELS
      if (gpu)
        r.before = time_call(
            dev,
            [&] {
              bench_old::embedding_backward(t.table->v.data_as<float>(), dout.v.data_as<float>(),
                                            t.ids->v.data_as<int32_t>(), N, C, -1);
            },
            reps);
#endif
      rows.push_back(r);
    }
  }

  // Bias gradients of a layer's linears from bf16 dout (column sums over N rows): QKV (3C), the
  // attention output and FFN output (C, twice a layer), the FFN input (4C).
  for (const auto& [OC, per_step] : {std::pair<int64_t, int>{3 * C, 12}, {C, 24}, {F, 12}}) {
    const DType t = gpu ? DType::BF16 : DType::F32;
    Buf dout(dev, t, {N, OC}, rng), x(dev, t, {N, 1}, rng), w(dev, t, {OC, 1}, rng),
        db(dev, DType::F32, {OC}, rng);
    Row r{fmt::format("bias gradient, {} rows x {} columns", N, OC)};
    r.per_step = per_step;
    // linear_backward with only dbias: the column reduction (no GEMM).
    r.after = time_call(
        dev, [&] { linear_backward(TensorView(), TensorView(), db.v, dout.v, x.v, w.v); }, reps);
#ifdef FTUNE_BENCH_OLD_KERNELS
    if (gpu)
      r.before = time_call(dev,
                           [&] {
                             bench_old::add_column_sums(db.v.data_as<float>(), dout.v.data,
                                                        dout.v.dtype, OC, N, OC);
                           },
                           reps);
#endif
    rows.push_back(r);
  }

  // LayerNorm: the parameter gradients alone, and the sublayer end forward / backward.
  {
    const float p = 0.1f;
    const DType h = gpu ? DType::BF16 : DType::F32;
    Buf a(dev, h, {N, C}, rng), a_copy(dev, h, {N, C}, rng), b(dev, DType::F32, {N, C}, rng),
        sum(dev, DType::F32, {N, C}, rng), out(dev, DType::F32, {N, C}, rng),
        out_h(dev, DType::BF16, {N, C}, rng), mean(dev, DType::F32, {N}, rng),
        rstd(dev, DType::F32, {N}, rng), w(dev, DType::F32, {C}, rng),
        bias(dev, DType::F32, {C}, rng), dout(dev, DType::F32, {N, C}, rng),
        dinp(dev, DType::F32, {N, C}, rng), ddrop(dev, h, {N, C}, rng),
        dw(dev, DType::F32, {C}, rng), dbias(dev, DType::F32, {C}, rng);
    const RngKey key{1234, 7, 1};
    const DropoutRows drop_rows{0, T, T};
    const TensorView copy16 = gpu ? out_h.v : TensorView();
    layer_norm_forward(out.v, mean.v, rstd.v, b.v, w.v, bias.v, 1e-12f);  // real statistics
    Row params{"LayerNorm weight + bias gradients"};
    params.per_step = 25;
    params.after = time_call(
        dev,
        [&] {
          layer_norm_backward(dinp.v, dw.v, dbias.v, dout.v, b.v, w.v, mean.v, rstd.v);
        },
        reps);
    Row dinp_only{"(LayerNorm input gradient alone)"};
    dinp_only.after = time_call(
        dev,
        [&] {
          layer_norm_backward(dinp.v, TensorView(), TensorView(), dout.v, b.v, w.v, mean.v,
                              rstd.v);
        },
        reps);
    params.after -= dinp_only.after;
#ifdef FTUNE_BENCH_OLD_KERNELS
    if (gpu)
      params.before = time_call(dev,
                                [&] {
                                  bench_old::layer_norm_params(
                                      dw.v.data_as<float>(), dbias.v.data_as<float>(),
                                      dout.v.data_as<float>(), b.v.data_as<float>(),
                                      mean.v.data_as<float>(), rstd.v.data_as<float>(), N, C);
                                },
                                reps);
#endif
    rows.push_back(params);

    Row fwd{"dropout + residual + LayerNorm forward"};
    fwd.per_step = 24;
    fwd.after = time_call(dev,
                          [&] {
                            dropout_add_layer_norm_forward(out.v, copy16, sum.v, mean.v, rstd.v,
                                                           a.v, b.v, w.v, bias.v, 1e-12f, p, key,
                                                           drop_rows);
                          },
                          reps);
    fwd.before = time_call(dev,
                           [&] {
                             dropout_forward(a_copy.v, a.v, p, key, drop_rows);
                             residual_forward(sum.v, a_copy.v, b.v);
                             layer_norm_forward(out.v, mean.v, rstd.v, sum.v, w.v, bias.v, 1e-12f,
                                                copy16);
                           },
                           reps);
    rows.push_back(fwd);
    Row bwd{"LayerNorm + dropout backward (with dweight)"};
    bwd.per_step = 24;
    bwd.after = time_call(dev,
                          [&] {
                            layer_norm_dropout_backward(dinp.v, ddrop.v, dw.v, dbias.v, dout.v,
                                                        sum.v, w.v, mean.v, rstd.v, p, key,
                                                        drop_rows);
                          },
                          reps);
    bwd.before = time_call(dev,
                           [&] {
                             layer_norm_backward(dinp.v, dw.v, dbias.v, dout.v, sum.v, w.v, mean.v,
                                                 rstd.v);
                             dropout_backward(ddrop.v, dinp.v, p, key, drop_rows);
                           },
                           reps);
    rows.push_back(bwd);
  }
  print(rows, gpu);
  // The unfused kernels take up to ~0.2 s a call at 8 x 512: few repetitions keep the kit's 15 s.
  return bench_deberta::run(dev, gpu, std::min(reps, 5)) == 0 ? 0 : 1;
}
