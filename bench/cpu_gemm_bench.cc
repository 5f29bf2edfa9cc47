// The CPU GEMM's libraries side by side (ops/cpu_gemm_library.h) on the products of real steps:
// MiniLM-L6 (hidden 384) scoring one ~23-token pair and a batch of 32 such pairs, MiniLM and
// BERT-base (hidden 768) training at 32 x 128 tokens (each linear layer's forward x @ W^T, input
// gradient dY @ W and weight gradient dW += dY^T @ X). Every product runs through cpu::gemm() (ftune's
// split over the compute threads), the libraries alternating call by call so that a drift in the
// machine's load falls on both; prints the median ms and GFLOP/s of each, and each family's total.
// The process re-executes itself with ftune's OpenBLAS settings first (core/blas_buffers.h).
//
//   cpu_gemm_bench [--threads 2] [--reps 7]
//                  [--only minilm-score1,minilm-score32,minilm-train,bert-train,llama-lora]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/blas_buffers.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"
#include "ops/primitives_cpu.h"

using namespace ftune;

namespace {

struct Product {
  std::string family, name;
  int64_t M, N, K;
  bool trans_a, trans_b;
  int count;  // how many times a step (or a scoring call) runs it
};

// Forward, input gradient and weight gradient of the four linear layers of one encoder layer
// (QKV fused), `tokens` rows, hidden `h`, feed-forward `f`.
void add_layer(std::vector<Product>& out, const std::string& family, int64_t tokens, int64_t h,
               int64_t f, int layers, bool backward) {
  const struct { const char* name; int64_t in, out; } linears[] = {
      {"qkv", h, 3 * h}, {"attn-out", h, h}, {"ffn-in", h, f}, {"ffn-out", f, h}};
  for (const auto& l : linears) {
    out.push_back({family, fmt::format("{} fwd {}x{}x{}", l.name, tokens, l.out, l.in), tokens,
                   l.out, l.in, false, true, layers});
    if (!backward) continue;
    out.push_back({family, fmt::format("{} dX {}x{}x{}", l.name, tokens, l.in, l.out), tokens,
                   l.in, l.out, false, false, layers});
    out.push_back({family, fmt::format("{} dW {}x{}x{}", l.name, l.out, l.in, tokens), l.out,
                   l.in, tokens, true, false, layers});
  }
}

// The low-rank products of LoRA rank r on every linear layer of a Llama-shaped decoder layer
// (q, k, v, o, gate, up, down; ops/lora.h): forward u = x A^T and out += s u B^T, backward
// dB += dout^T u, h = dout B, dA += h^T x and dX = h A, `tokens` rows.
void add_lora_layer(std::vector<Product>& out, const std::string& family, int64_t tokens,
                    int64_t h, int64_t kv, int64_t f, int64_t r, int layers) {
  const struct { const char* name; int64_t in, out; } sites[] = {
      {"q", h, h}, {"k", h, kv}, {"v", h, kv}, {"o", h, h}, {"gate", h, f}, {"up", h, f},
      {"down", f, h}};
  for (const auto& s : sites) {
    const auto add = [&](const char* what, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
      out.push_back({family, fmt::format("{} {} {}x{}x{}", s.name, what, M, N, K), M, N, K, ta,
                     tb, layers});
    };
    add("u=xA'", tokens, r, s.in, false, true);
    add("y+=uB'", tokens, s.out, r, false, true);
    add("dB+=g'u", s.out, r, tokens, true, false);
    add("h=gB", tokens, r, s.out, false, false);
    add("dA+=h'x", r, s.in, tokens, true, false);
    add("dX=hA", tokens, s.in, r, false, false);
  }
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_blas_settings(argv);
  CLI::App app{"ftune CPU GEMM libraries on MiniLM / BERT-base products"};
  int threads = 2, reps = 7;
  std::vector<std::string> only = {"minilm-score1", "minilm-score32", "minilm-train",
                                   "bert-train"};
  app.add_option("--threads", threads, "compute threads");
  app.add_option("--reps", reps, "timed calls of each product per library (median)");
  app.add_option("--only", only, "families to run")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  set_compute_threads(threads);

  std::vector<Product> products;
  for (const std::string& f : only) {
    if (f == "minilm-score1") add_layer(products, f, 23, 384, 1536, 6, false);
    else if (f == "minilm-score32") add_layer(products, f, 32 * 23, 384, 1536, 6, false);
    else if (f == "minilm-train") add_layer(products, f, 32 * 128, 384, 1536, 6, true);
    else if (f == "bert-train") add_layer(products, f, 32 * 128, 768, 3072, 12, true);
    else if (f == "llama-lora") add_lora_layer(products, f, 4 * 128, 768, 256, 2048, 16, 12);
    else return fmt::print(stderr, "unknown family {}\n", f), 2;
  }
  std::vector<cpu::GemmLibrary> libs = {cpu::GemmLibrary::OpenBlas};
  if (cpu::onednn_available()) libs.push_back(cpu::GemmLibrary::OneDnn);
  fmt::print("{} threads; {}\n", threads, cpu::gemm_library_description());

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::map<std::string, std::map<int, double>> family_ms;  // family -> library -> ms a step
  fmt::print("{:<15} {:<28}", "family", "product");
  for (auto lib : libs)
    fmt::print(" {:>10} {:>8}", std::string(cpu::gemm_library_name(lib)) + " ms", "GFLOP/s");
  fmt::print("\n");
  for (const Product& p : products) {
    std::vector<float> a(p.M * p.K), b(p.K * p.N), c(p.M * p.N);
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    const int64_t lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
    std::vector<std::vector<double>> ms(libs.size());
    for (int r = 0; r < reps + 2; ++r)
      for (size_t i = 0; i < libs.size(); ++i) {
        cpu::set_gemm_library(libs[i]);
        const auto t0 = std::chrono::steady_clock::now();
        // The weight gradient adds into dW (beta 1), as the linear layer's backward does.
        cpu::gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.0f, a.data(), lda, b.data(), ldb,
                  p.trans_a ? 1.0f : 0.0f, c.data(), p.N);
        const std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
        if (r >= 2) ms[i].push_back(dt.count());  // two warm-up calls (JIT, buffers)
      }
    fmt::print("{:<15} {:<28}", p.family, p.name);
    const double flop = 2.0 * p.M * p.N * p.K;
    for (size_t i = 0; i < libs.size(); ++i) {
      const double m = median(ms[i]);
      family_ms[p.family][static_cast<int>(libs[i])] += m * p.count;
      fmt::print(" {:>10.3f} {:>8.1f}", m, flop / m / 1e6);
    }
    fmt::print("\n");
  }
  fmt::print("\nper step (scoring call): the family's products x their count in the model\n");
  for (const auto& [family, by_lib] : family_ms) {
    fmt::print("{:<15}", family);
    for (const auto& [lib, ms] : by_lib)
      fmt::print("  {} {:.1f} ms", cpu::gemm_library_name(static_cast<cpu::GemmLibrary>(lib)), ms);
    if (by_lib.size() == 2)
      fmt::print("  openblas/onednn {:.2f}x",
                 by_lib.at(static_cast<int>(cpu::GemmLibrary::OpenBlas)) /
                     by_lib.at(static_cast<int>(cpu::GemmLibrary::OneDnn)));
    fmt::print("\n");
  }
  return 0;
}
