// Milliseconds per forward + backward of the attention op (ops/attention.h) on the CPU for one
// shape under each visibility: bidirectional (every key: what causal and windowed calls cost
// before their query blocks and key bands), causal, causal with a sliding window, and ModernBERT's
// local window; padded rows and the same tokens packed with cu_seqlens. fp32, no dropout; the
// median of --reps timed calls after one warm-up.
//
//   attention_bench [--batch 4] [--seq 512] [--heads 8] [--kv-heads 2] [--head-dim 64]
//                   [--window 128] [--reps 5] [--threads 0]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/memory.h"
#include "core/thread_pool.h"
#include "ops/attention.h"

using namespace ftune;

namespace {

HostTensor random_tensor(Shape shape, std::mt19937_64& rng) {
  HostTensor t(DType::F32, shape);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftune attention op benchmark (CPU)"};
  int64_t B = 4, T = 512, Hq = 8, Hkv = 2, D = 64, W = 128;
  int reps = 5, threads = 0;
  app.add_option("--batch", B, "sequences");
  app.add_option("--seq", T, "tokens per sequence");
  app.add_option("--heads", Hq, "query heads");
  app.add_option("--kv-heads", Hkv, "key/value heads");
  app.add_option("--head-dim", D, "head size");
  app.add_option("--window", W, "sliding / local window (HF's config value)");
  app.add_option("--reps", reps, "timed calls");
  app.add_option("--threads", threads, "compute threads (0: all cores)");
  CLI11_PARSE(app, argc, argv);
  set_compute_threads(threads);

  const int64_t N = B * T;
  std::mt19937_64 rng(7);
  HostTensor q = random_tensor({N, Hq * D}, rng), k = random_tensor({N, Hkv * D}, rng),
             v = random_tensor({N, Hkv * D}, rng), dout = random_tensor({N, Hq * D}, rng);
  HostTensor out(DType::F32, {N, Hq * D}), dq(DType::F32, {N, Hq * D}),
      dk(DType::F32, {N, Hkv * D}), dv(DType::F32, {N, Hkv * D});
  HostTensor cu(DType::I32, {B + 1});
  for (int64_t b = 0; b <= B; ++b) cu.data<int32_t>()[b] = static_cast<int32_t>(b * T);

  struct Visibility {
    const char* name;
    bool causal;
    AttentionWindow window;
  };
  const Visibility kinds[] = {{"bidirectional", false, {}},
                              {"causal", true, {}},
                              {"causal + sliding_window", true, hf_sliding_window(W)},
                              {"local_attention", false, hf_local_attention(W)}};
  std::printf("attention fwd+bwd, CPU fp32, %d threads: B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld "
              "window=%lld (median of %d; other processes on the machine disturb timings)\n",
              compute_threads(), static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(D),
              static_cast<long long>(W), reps);
  for (bool packed : {false, true})
    for (const Visibility& kind : kinds) {
      AttentionCall c;
      c.spec = {Hq, Hkv, D, kind.causal, kind.window, default_attention_scale(D), 0.0f};
      c.rows = {B, T, packed ? cu.view() : TensorView(), {}};
      const AttentionBuffers need = attention_buffers(c.spec, Device::cpu(), false, B, N, T, true);
      HostTensor saved(DType::F32, {need.saved}), ws(DType::F32, {need.workspace});
      c.workspace = ws.view();
      auto step = [&] {
        attention_forward(c, out.view(), saved.view(), q.view(), k.view(), v.view());
        attention_backward(c, dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                           v.view(), out.view(), saved.view());
      };
      step();
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        step();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf("  %-7s %-24s %9.2f ms\n", packed ? "packed" : "padded", kind.name,
                  ms[ms.size() / 2]);
    }
  return 0;
}
