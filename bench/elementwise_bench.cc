// GB/s of the vectorised CUDA elementwise kernels (cuda/vec.cuh) at BERT-base training sizes,
// each on 16-byte-aligned views (the 128-bit path, what the arena's buffers always get) and on
// views shifted by one element (the scalar path the same op takes for misaligned views): the
// speedup column is what the vectorisation buys. Kernels: cast f32 -> bf16, GELU forward /
// backward (bf16), the mixed residual add (bf16 + f32 -> f32), LayerNorm forward with its bf16
// copy and its input gradient, the embedding lookup (+=) and AdamW over BERT-base's parameters
// with the layers' bf16 shadow. Bytes counted: each tensor read or written once. CUDA only.
//
//   elementwise_bench [--tokens 4096] [--hidden 768] [--reps 50]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

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

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

using namespace ftune;

#ifdef FTUNE_WITH_CUDA
namespace {

// Seconds per call of fn, after warm-up calls.
double time_call(Device dev, const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  cuda::synchronize(dev);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  cuda::synchronize(dev);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftune vectorised elementwise kernels benchmark"};
  int64_t tokens = 4096, C = 768;
  int reps = 50;
  app.add_option("--tokens", tokens, "rows (batch x sequence)");
  app.add_option("--hidden", C, "hidden size C (the FFN is 4 C)");
  app.add_option("--reps", reps, "timed calls per measurement");
  CLI11_PARSE(app, argc, argv);
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "elementwise_bench: no CUDA device\n");
    return 1;
  }
  const Device dev = Device::cuda(0);
  const int64_t N = tokens, F = 4 * C, NC = N * C, NF = N * F, V = 30522;
  // BERT-base-like parameters: embeddings, 12 layers (the shadowed range), head.
  const int64_t layer = 4 * C * C + 2 * C * F + 9 * C + F, layers = 12 * layer;
  const int64_t params = (V + 512 + 2) * C + 2 * C + layers + C * C + C + 2 * C + 2;

  ArenaPlan plan;
  auto add = [&](const char* name, DType t, int64_t n) { plan.add_flat(name, t, n + 8); };
  add("x", DType::F32, NF);
  add("y", DType::F32, NF);
  add("h1", DType::BF16, NF);
  add("h2", DType::BF16, NF);
  add("h3", DType::BF16, NF);
  add("w", DType::F32, C);
  add("b", DType::F32, C);
  add("stat1", DType::F32, N);
  add("stat2", DType::F32, N);
  add("table", DType::F32, V * C);
  add("ids", DType::I32, N);
  add("p", DType::F32, params);
  add("g", DType::F32, params);
  add("shadow", DType::BF16, layers);
  ParamTable table;
  table.add("embeddings", Shape{params - layers - (C * C + C + 2 * C + 2)});
  for (int l = 0; l < 12; ++l) table.add("layer" + std::to_string(l), Shape{layer});
  table.add("head", Shape{C * C + C + 2 * C + 2});
  AdamW adam(table, AdamWOptions{});
  adam.add_to_plan(plan);
  Arena arena(dev, std::move(plan));
  adam.bind(arena);
  for (const char* name : {"x", "y", "w", "b", "table", "p", "g"}) fill(arena.view(name), 0.5f);
  HostTensor ids(DType::I32, arena.view("ids").shape);  // spread over the table's rows
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(i * 7919 % V);
  copy(arena.view("ids"), ids.view());
  for (const char* name : {"h1", "h2", "h3"}) fill_zero(arena.view(name));
  const TensorView scalars = adam.step_scalars();

  std::printf("device: %s\nN %lld tokens, C %lld, F %lld; AdamW over %.1fM parameters (bf16 shadow "
              "of %.1fM); %d timed calls per cell\n\n",
              cuda::device_description(dev).c_str(), static_cast<long long>(N),
              static_cast<long long>(C), static_cast<long long>(F), params / 1e6, layers / 1e6,
              reps);
  std::printf("%-34s %10s %12s %12s %8s\n", "kernel", "MB", "128-bit GB/s", "scalar GB/s",
              "speedup");
  // shift 0: the buffers themselves (aligned); 1: the same views one element in.
  auto v = [&](const char* name, int64_t n, int64_t shift, Shape s = {}) {
    TensorView t = arena.view(name).flat_range(shift, n);
    return s.rank() > 0 ? t.reshape(s) : t;
  };
  struct Case {
    const char* name;
    double bytes;
    std::function<void(int64_t)> run;
  };
  const Case cases[] = {
      {"cast f32 -> bf16 (N, F)", 6.0 * NF,
       [&](int64_t s) { cast(v("h1", NF, s), v("x", NF, s)); }},
      {"gelu forward bf16 (N, F)", 4.0 * NF,
       [&](int64_t s) { gelu_forward(v("h2", NF, s), v("h1", NF, s), GeluForm::Erf); }},
      {"gelu backward bf16 (N, F)", 6.0 * NF,
       [&](int64_t s) {
         gelu_backward(v("h3", NF, s), v("h1", NF, s), v("h2", NF, s), GeluForm::Erf);
       }},
      {"residual bf16 + f32 -> f32 (N, C)", 10.0 * NC,
       [&](int64_t s) { residual_forward(v("y", NC, s), v("h1", NC, s), v("x", NC, s)); }},
      {"layer_norm fwd + bf16 copy (N, C)", 10.0 * NC,
       [&](int64_t s) {
         layer_norm_forward(v("y", NC, s, {N, C}), v("stat1", N, 0), v("stat2", N, 0),
                            v("x", NC, s, {N, C}), v("w", C, s), v("b", C, s), 1e-12f,
                            v("h1", NC, s, {N, C}));
       }},
      {"layer_norm dinp (N, C)", 12.0 * NC,
       [&](int64_t s) {
         layer_norm_backward(v("y", NC, s, {N, C}), TensorView(), TensorView(),
                             v("x", NC, s, {N, C}), v("x", NC, s, {N, C}), v("w", C, s),
                             v("stat1", N, 0), v("stat2", N, 0));
       }},
      {"embedding += (N, C)", 12.0 * NC,
       [&](int64_t s) {
         embedding_forward(v("y", NC, s, {N, C}), v("ids", N, 0), v("table", V * C, s, {V, C}),
                           true);
       }},
      {"adamw + bf16 shadow (P)", 28.0 * params + 2.0 * layers,
       [&](int64_t s) {
         adam.apply(v("p", params, s), v("g", params, s), 1e-5f, v("shadow", layers, 0),
                    table.at("layer0").offset);
       }},
  };
  step_scalars_apply_unconditionally(scalars, 1.0f);
  for (const Case& c : cases) {
    const double fast = time_call(dev, [&] { c.run(0); }, reps);
    const double slow = time_call(dev, [&] { c.run(1); }, reps);
    std::printf("%-34s %10.1f %12.1f %12.1f %7.2fx\n", c.name, c.bytes / 1e6, c.bytes / fast / 1e9,
                c.bytes / slow / 1e9, slow / fast);
  }
  return 0;
}

#else
int main() {
  std::fprintf(stderr, "elementwise_bench: this build has no CUDA backend (FTUNE_CUDA=OFF)\n");
  return 1;
}
#endif
