// The causal-LM loss through the lm_head (ops/lm_head_loss.h), chunked, against the plain path
// that materialises the (tokens x vocabulary) logits (GEMM, softmax cross-entropy, the two
// gradient GEMMs), on the CPU: seconds for forward + backward and the bytes each holds besides
// the inputs and gradients, and the largest difference of their losses and input gradients.
// Defaults: Qwen2.5-0.5B's head (hidden 896, vocabulary 151,936) on 512 tokens.
//
//   lm_head_loss_bench [--tokens 512] [--hidden 896] [--vocab 151936] [--token-chunk 256]
//                      [--vocab-chunk 4096] [--threads 2] [--reps 2] [--frozen]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cross_entropy.h"
#include "ops/lm_head_loss.h"
#include "ops/primitives_cpu.h"

using namespace ftune;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string mib(double bytes) {
  return fmt::format("{:.1f} MiB", bytes / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Chunked causal-LM loss vs materialised logits (CPU)");
  int64_t T = 512, H = 896, V = 151936, tc = 256, vc = 4096;
  int threads = 2, reps = 2;
  bool frozen = false;
  app.add_option("--tokens", T);
  app.add_option("--hidden", H);
  app.add_option("--vocab", V);
  app.add_option("--token-chunk", tc);
  app.add_option("--vocab-chunk", vc);
  app.add_option("--threads", threads);
  app.add_option("--reps", reps);
  app.add_flag("--frozen", frozen, "the lm_head is frozen (LoRA): no dW");
  CLI11_PARSE(app, argc, argv);
  set_compute_threads(threads);

  std::mt19937_64 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> h(T * H), W(V * H);
  for (float& v : h) v = n(rng);
  for (float& v : W) v = 0.05f * n(rng);
  std::vector<int32_t> y(T);
  for (int64_t t = 0; t < T; ++t) y[t] = t % 4 == 0 ? -100 : static_cast<int32_t>(rng() % V);

  // The chunked path.
  const LmHeadLossShape s{T, H, V, tc, vc};
  std::vector<float> ws(lm_head_loss_workspace(s)), lse(T), dh(T * H), dW(frozen ? 0 : V * H);
  float loss = 0;
  double fused_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::fill(dh.begin(), dh.end(), 0.0f), std::fill(dW.begin(), dW.end(), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    cpu::lm_head_loss_forward(&loss, lse.data(), h.data(), W.data(), y.data(), 0, s, ws.data());
    cpu::lm_head_loss_backward(dh.data(), frozen ? nullptr : dW.data(), lse.data(), h.data(),
                               W.data(), y.data(), 0, 1.0f, s, ws.data());
    fused_s = std::min(fused_s, seconds_since(t0));
  }

  // The plain path: logits, probabilities and their gradient, each (T, V).
  std::vector<float> logits(T * V), probs(T * V), dlogits(T * V), dh2(T * H),
      dW2(frozen ? 0 : V * H);
  float loss2 = 0;
  double plain_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::gemm(false, true, T, V, H, 1.0f, h.data(), H, W.data(), H, 0.0f, logits.data(), V);
    cpu::cross_entropy_forward(&loss2, probs.data(), logits.data(), y.data(), nullptr, 0.0f, T, V);
    cpu::cross_entropy_backward(dlogits.data(), probs.data(), y.data(), nullptr, 0.0f, 1.0f, T, V);
    cpu::gemm(false, false, T, H, V, 1.0f, dlogits.data(), V, W.data(), H, 0.0f, dh2.data(), H);
    if (!frozen)
      cpu::gemm(true, false, V, H, T, 1.0f, dlogits.data(), V, h.data(), H, 0.0f, dW2.data(), H);
    plain_s = std::min(plain_s, seconds_since(t0));
  }
  double worst = 0;
  for (int64_t i = 0; i < T * H; ++i) worst = std::max(worst, double(std::abs(dh[i] - dh2[i])));
  const double gemm_flop = 2.0 * T * V * H * (frozen ? 3 : 4);  // + the recomputed block
  fmt::print("tokens {} hidden {} vocab {} ({} lm_head), {} threads, best of {}\n", T, H, V,
             frozen ? "frozen" : "trained", threads, reps);
  fmt::print(
      "  chunked {}x{}: {:.3f} s fwd+bwd ({:.1f} GFLOP/s in its GEMMs), holds {} (one "
      "block + lse)\n",
      tc, vc, fused_s, gemm_flop / fused_s / 1e9, mib(4.0 * (ws.size() + lse.size())));
  fmt::print(
      "  materialised:   {:.3f} s fwd+bwd, holds {} (logits, probabilities, their "
      "gradient)\n",
      plain_s, mib(4.0 * 3 * T * V));
  fmt::print(
      "  loss {:.7f} vs {:.7f} (difference {:.2e}); largest input-gradient difference "
      "{:.2e}\n",
      loss, loss2, std::abs(double(loss) - loss2), worst);
  return 0;
}
