// Time of the CPU's elementwise kernels at MiniLM training and scoring sizes (issue 39): AdamW
// over all-MiniLM-L6-v2's 22.7M parameters (GB/s: p, g, m, v read, p, m, v written), GELU forward
// over a (tokens, 1536) activation and layer norm forward (elements/s) and backward over
// (tokens, 384). Median of --reps calls after one warm-up. Also the dropout multipliers of attention's probabilities at
// MiniLM training's size (32 x 12 heads x 128 x 128, drawn row by row of 128 as attention draws
// them: elements/s of the Philox stream). Prints one JSON line.
//
//   cpu_elementwise_bench [--threads 2] [--reps 9] [--tokens 4096]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "device_timing.h"
#include "core/thread_pool.h"
#include "ops/dropout.h"
#include "ops/gelu.h"
#include "ops/layer_norm.h"
#include "optim/adamw.h"

using ftune::bench::median_seconds;

int main(int argc, char** argv) {
  int threads = 2, reps = 9;
  int64_t tokens = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else if (a == "--tokens") tokens = std::stoll(argv[i + 1]);
  }
  ftune::set_compute_threads(threads);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t params = 22'713'216;  // all-MiniLM-L6-v2 with a 2-label head
  std::vector<float> p(params), g(params), m(params), v(params);
  for (int64_t i = 0; i < params; ++i) {
    p[i] = u(rng);
    g[i] = u(rng) * 1e-2f;
    m[i] = u(rng) * 1e-3f;
    v[i] = std::abs(u(rng)) * 1e-5f;
  }
  const double adamw = median_seconds(reps, [&] {
    ftune::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), params, 2e-5f, 0.01f, 0.9f,
                             0.999f, 1e-8f, 2e-5f, 0.5f, 1.0f, nullptr, nullptr);
  });
  const int64_t wide = tokens * 1536, C = 384;
  std::vector<float> x(wide), y(wide), w(C, 1.0f), b(C, 0.0f), mean(tokens), rstd(tokens);
  for (float& e : x) e = u(rng) * 3.0f;
  const double gelu = median_seconds(reps, [&] {
    ftune::cpu::gelu_forward(y.data(), x.data(), wide, ftune::GeluForm::Erf);
  });
  const double norm = median_seconds(reps, [&] {
    ftune::cpu::layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr,
                                   nullptr, w.data(), b.data(), tokens, C, 1e-12f, nullptr,
                                   nullptr);
  });
  std::vector<float> dy(tokens * C), dx(tokens * C), dw(C), db(C);
  for (float& e : dy) e = u(rng);
  const double norm_backward = median_seconds(reps, [&] {
    ftune::cpu::layer_norm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                    mean.data(), rstd.data(), tokens, C);
  });
  const int64_t rows = 32 * 12 * 128, row = 128;
  std::vector<float> mult(row);
  const double dropout = median_seconds(reps, [&] {
    ftune::parallel_for(rows, [&](int64_t r0, int64_t r1) {
      thread_local std::vector<float> m(row);
      for (int64_t r = r0; r < r1; ++r)
        ftune::cpu::dropout_multipliers(m.data(), ftune::RngKey{7, 3, 1},
                                        static_cast<uint64_t>(r) * 1000, row, 0.1f);
    });
  });
  nlohmann::json out;
  out["threads"] = threads;
  out["adamw_ms"] = adamw * 1e3;
  out["adamw_gb_per_s"] = 28.0 * params / adamw / 1e9;
  out["gelu_ms"] = gelu * 1e3;
  out["gelu_gelem_per_s"] = wide / gelu / 1e9;
  out["layer_norm_ms"] = norm * 1e3;
  out["layer_norm_gelem_per_s"] = tokens * C / norm / 1e9;
  out["layer_norm_backward_ms"] = norm_backward * 1e3;
  out["attention_dropout_ms"] = dropout * 1e3;
  out["attention_dropout_gelem_per_s"] = rows * row / dropout / 1e9;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
