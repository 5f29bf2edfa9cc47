// The scoring GEMMs against the core's measured fp32 peak (issue 39): MiniLM's four linear
// products (QKV fused, attention output, FFN up, FFN down) at scoring's row counts, through the
// packed weights of ops/cpu_matmul.h (fp32 and, where the CPU has it, bf16) and through the plain
// GEMM (dnnl_sgemm or OpenBLAS, packing per call), alternating call by call on one thread, next
// to a peak probe: independent AVX-512 (or AVX2) FMAs in registers, the FLOP/s this core reaches
// at its present clock. GF/s and the share of that peak, median of --reps. Prints markdown.
//
//   cpu_matmul_bench [--reps 9] [--rows 23,256,1024]
#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device_timing.h"
#include "core/thread_pool.h"
#include "ops/cpu_gemm_library.h"
#include "ops/cpu_matmul.h"
#include "ops/linear.h"

namespace {

using ftune::bench::median_seconds;

constexpr int64_t kProbeIters = 200'000;  // ~3 ms a probe: as short as the products, so that
// both see the same share of a loaded machine's core
volatile float g_sink = 0.0f;

// 12 independent FMA chains of full vectors (the benchmarks build without -march=native: each
// probe names its instruction set; main picks by what the CPU reports).
__attribute__((target("avx512f"))) void fma_chains_avx512() {
  __m512 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_ps(0.001f * k);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kProbeIters; ++i)
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  float total = 0.0f;
  for (int k = 0; k < 12; ++k) total += _mm512_reduce_add_ps(acc[k]);
  g_sink = total;
}

__attribute__((target("avx2,fma"))) void fma_chains_avx2() {
  __m256 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_ps(0.001f * k);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kProbeIters; ++i)
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  float f[8];
  _mm256_storeu_ps(f, acc[0]);
  g_sink = f[0];
}

// FLOP/s of the probe: the core's fp32 peak at its clock now; `lanes` gets the vector width.
double fma_peak(int reps, int* lanes) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  *lanes = avx512 ? 16 : 8;
  const double s = median_seconds(reps, avx512 ? fma_chains_avx512 : fma_chains_avx2);
  return 2.0 * *lanes * 12 * kProbeIters / s;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  std::vector<int64_t> row_counts = {23, 256, 1024};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") reps = std::stoi(argv[i + 1]);
    if (a == "--rows") {
      row_counts.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string x; std::getline(ss, x, ',');) row_counts.push_back(std::stoll(x));
    }
  }
  ftune::set_compute_threads(1);
  int lanes = 0;
  const double peak = fma_peak(4 * reps, &lanes);
  fmt::print("# Scoring GEMMs on one thread against the measured fp32 peak\n\n");
  fmt::print("fp32 peak probe: {:.1f} GF/s (12 FMA chains of {} lanes); GEMM: {}; {}\n\n",
             peak / 1e9, lanes,
             ftune::cpu::gemm_library_description(), ftune::cpu::matmul_description());
  const bool bf16 = ftune::cpu::packed_matmul_supports(ftune::cpu::MatmulPrecision::BF16);
  fmt::print("| rows x out x in | plain GEMM GF/s (% peak) | packed fp32 GF/s (% peak) |{}\n",
             bf16 ? " packed bf16 GF/s |" : "");
  fmt::print("| --- | --- | --- |{}\n", bf16 ? " --- |" : "");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
  for (const int64_t M : row_counts) {
    for (const auto& [OC, C] : shapes) {
      std::vector<float> x(M * C), w(OC * C), b(OC), y(M * OC);
      for (float& e : x) e = u(rng);
      for (float& e : w) e = u(rng);
      for (float& e : b) e = u(rng);
      ftune::cpu::PackedWeights packed, packed16(ftune::cpu::MatmulPrecision::BF16);
      const double flop = 2.0 * M * OC * C;
      const double t_plain = median_seconds(reps, [&] {
        ftune::cpu::linear_forward(y.data(), OC, x.data(), C, w.data(), b.data(), M, C, OC);
      });
      const double t_packed = median_seconds(reps, [&] {
        packed.linear(y.data(), OC, x.data(), C, w.data(), b.data(), M, C, OC);
      });
      std::string t16;
      if (bf16) {
        const double t = median_seconds(reps, [&] {
          packed16.linear(y.data(), OC, x.data(), C, w.data(), b.data(), M, C, OC);
        });
        t16 = fmt::format(" {:.1f} |", flop / t / 1e9);
      }
      fmt::print("| {} x {} x {} | {:.1f} ({:.0f} %) | {:.1f} ({:.0f} %) |{}\n", M, OC, C,
                 flop / t_plain / 1e9, 100.0 * flop / t_plain / peak, flop / t_packed / 1e9,
                 100.0 * flop / t_packed / peak, t16);
    }
  }
  return 0;
}
