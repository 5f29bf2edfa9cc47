// TFLOP/s of the BERT-base training GEMMs through cuda::gemm (cuBLASLt): for each linear layer
// (QKV 768->2304, attention output 768->768, FC1 768->3072, FC2 3072->768) its forward
// (x @ W^T), input gradient (dout @ W) and weight gradient (dW += dout^T @ x) at `tokens` rows,
// in fp32, TF32 and bf16 (bf16 inputs, fp32 accumulation; bf16 activations, fp32 dW with
// beta = 1), plus, in bf16, the forward with its bias fused (a bf16 bias) and the weight gradient
// with the bias gradient fused (what ops/linear_cuda.cu runs). Each row compares the heuristic's
// first algorithm with the autotuned one (timed candidates, cache file: see cuda/gemm.h), and the
// run ends with the path counters (a fused row that fell back shows in them). CUDA only.
//
//   gemm_bench [--tokens 4096] [--reps 50] [--modes fp32,tf32,bf16]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/gpu_paths.h"
#include "core/memory.h"

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#include "cuda/gemm_algo_cache.h"
#endif

using namespace ftune;

#ifdef FTUNE_WITH_CUDA
namespace {

struct Linear {
  const char* name;
  int64_t in, out;
};

// A device buffer of random values of type t.
struct Buf {
  Device dev;
  size_t bytes;
  void* p;
  Buf(Device d, DType t, int64_t n, std::mt19937& rng) : dev(d), bytes(n * dtype_size(t)) {
    p = device_malloc(dev, bytes);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<uint8_t> host(bytes);
    for (int64_t i = 0; i < n; ++i) {
      const float v = u(rng);
      if (t == DType::F32) reinterpret_cast<float*>(host.data())[i] = v;
      if (t == DType::BF16) reinterpret_cast<bf16_t*>(host.data())[i] = float_to_bf16(v);
      if (t == DType::F16) reinterpret_cast<f16_t*>(host.data())[i] = float_to_f16(v);
    }
    cuda::memcpy(p, dev, host.data(), Device::cpu(), bytes);
  }
  ~Buf() { device_free(dev, p, bytes); }
};

// Seconds per call: a few warm-up calls (the first one chooses the algorithm), then `reps` timed.
double time_call(Device dev, const cuda::GemmArgs& g, int reps) {
  for (int i = 0; i < 3; ++i) cuda::gemm(g);
  cuda::synchronize(dev);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) cuda::gemm(g);
  cuda::synchronize(dev);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftune GEMM benchmark (cuBLASLt, BERT-base training shapes)"};
  int64_t tokens = 4096;
  int reps = 50;
  std::vector<std::string> modes = {"fp32", "tf32", "bf16"};
  app.add_option("--tokens", tokens, "rows of the activations (batch x sequence)");
  app.add_option("--reps", reps, "timed calls per measurement");
  app.add_option("--modes", modes, "fp32, tf32, bf16")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "gemm_bench: no CUDA device\n");
    return 1;
  }
  const Device dev = Device::cuda(0);
  cuda::gemm_init(0);
  std::printf("device: %s\ncache file: %s\ntokens: %lld, %d timed calls per cell\n\n",
              cuda::device_description(dev).c_str(), cuda::gemm_cache_path().c_str(),
              static_cast<long long>(tokens), reps);
  const Linear layers[] = {{"qkv", 768, 2304}, {"attn_out", 768, 768}, {"fc1", 768, 3072},
                           {"fc2", 3072, 768}};
  std::mt19937 rng(1234);
  std::printf("%-9s %-10s %-16s %-5s %10s %10s %8s\n", "layer", "pass", "MxNxK", "mode",
              "heur TF/s", "tuned TF/s", "speedup");
  for (const std::string& mode : modes) {
    if (mode != "fp32" && mode != "tf32" && mode != "bf16") {
      std::fprintf(stderr, "gemm_bench: unknown mode %s\n", mode.c_str());
      return 1;
    }
    const DType t = mode == "bf16" ? DType::BF16 : DType::F32;
    cuda::set_gemm_tf32(mode == "tf32");
    for (const Linear& l : layers) {
      Buf x(dev, t, tokens * l.in, rng), w(dev, t, l.out * l.in, rng),
          out(dev, t, tokens * l.out, rng), dout(dev, t, tokens * l.out, rng),
          dx(dev, t, tokens * l.in, rng), dw(dev, DType::F32, l.out * l.in, rng),
          bias(dev, t, l.out, rng), dbias(dev, DType::F32, l.out, rng);
      struct Pass {
        const char* name;
        cuda::GemmArgs g;
      };
      std::vector<Pass> passes;
      cuda::GemmArgs fwd;  // out (T, OC) = x (T, C) @ W^T
      fwd.trans_b = true;
      fwd.M = tokens, fwd.N = l.out, fwd.K = l.in;
      fwd.A = x.p, fwd.a_type = t, fwd.lda = l.in;
      fwd.B = w.p, fwd.b_type = t, fwd.ldb = l.in;
      fwd.C = out.p, fwd.c_type = t, fwd.ldc = l.out;
      passes.push_back({"fwd", fwd});
      cuda::GemmArgs dinp;  // dx (T, C) = dout (T, OC) @ W (OC, C)
      dinp.M = tokens, dinp.N = l.in, dinp.K = l.out;
      dinp.A = dout.p, dinp.a_type = t, dinp.lda = l.out;
      dinp.B = w.p, dinp.b_type = t, dinp.ldb = l.in;
      dinp.C = dx.p, dinp.c_type = t, dinp.ldc = l.in;
      passes.push_back({"dinp", dinp});
      cuda::GemmArgs dweight;  // dW (OC, C) += dout^T (OC, T) @ x (T, C), fp32
      dweight.trans_a = true;
      dweight.M = l.out, dweight.N = l.in, dweight.K = tokens;
      dweight.beta = 1.0f;
      dweight.A = dout.p, dweight.a_type = t, dweight.lda = l.out;
      dweight.B = x.p, dweight.b_type = t, dweight.ldb = l.in;
      dweight.C = dw.p, dweight.c_type = DType::F32, dweight.ldc = l.in;
      passes.push_back({"dW", dweight});
      if (t == DType::BF16) {
        cuda::GemmArgs g = fwd;  // + bias (bf16, as the encoder's shadow bias)
        g.epilogue = cuda::GemmEpilogue::Bias;
        g.bias = bias.p;
        g.bias_type = t;
        passes.push_back({"fwd+bias", g});
        g = dweight;  // + the bias gradient (fp32), reduced from dout inside the GEMM
        g.epilogue = cuda::GemmEpilogue::BgradOpA;
        g.bias_grad = static_cast<float*>(dbias.p);
        passes.push_back({"dW+dbias", g});
      }
      for (const Pass& p : passes) {
        const double flops = 2.0 * p.g.M * p.g.N * p.g.K;
        cuda::set_gemm_autotune(false);
        const double heur = time_call(dev, p.g, reps);
        cuda::set_gemm_autotune(true);
        const double tuned = time_call(dev, p.g, reps);
        std::printf("%-9s %-10s %-16s %-5s %10.1f %10.1f %7.2fx\n", l.name, p.name,
                    fmt::format("{}x{}x{}", p.g.M, p.g.N, p.g.K).c_str(), mode.c_str(),
                    flops / heur * 1e-12, flops / tuned * 1e-12, heur / tuned);
      }
    }
  }
  cuda::set_gemm_tf32(false);
  std::printf("\n%s\n", cuda::gemm_autotune_summary().c_str());
  const GpuPathCounts paths = gpu_path_counts();
  for (GpuPath p : {GpuPath::GemmFused, GpuPath::GemmPlain, GpuPath::GemmUnfused,
                    GpuPath::GemmNaive})
    std::printf("%s: %lld calls\n", gpu_path_name(p), static_cast<long long>(paths[p]));
  cuda::gemm_autotune_save();
  return 0;
}

#else
int main() {
  std::fprintf(stderr, "gemm_bench: this build has no CUDA backend (FTUNE_CUDA=OFF)\n");
  return 1;
}
#endif
