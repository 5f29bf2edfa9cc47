// The GEMM path policy (see gemm_path.h). Plain C++: built and tested without CUDA.
#include "cuda/gemm_path.h"

#include <mutex>
#include <unordered_set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/gpu_paths.h"
#include "cuda/gemm_algo_cache.h"

namespace ftune::cuda {
namespace {

uint8_t align_of(const void* p) {
  return static_cast<uint8_t>(gemm_alignment_class(p));
}

// One warning per call key and step: the fallbacks of a run are few shapes, each used thousands of
// times.
void warn_fallback(const GemmCallKey& key, const GemmArgs& g, const std::string& what) {
  static std::mutex mu;
  static std::unordered_set<GemmCallKey, GemmCallKeyHash> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(key).second) return;
  }
  spdlog::warn("{}: {} (counted in summary.json gpu_paths; warned once per shape)",
               describe_gemm(g), what);
}

// The answer of a cuBLASLt call that did not succeed: NotSupported returns (the caller falls
// back), anything else throws.
void throw_unless_not_supported(const GemmArgs& g, const LtResult& r) {
  if (r.status == LtStatus::NotSupported) return;
  if (r.status == LtStatus::InvalidValue)
    throw DeviceError(fmt::format(
        "{}: cuBLASLt rejected the arguments ({}); this is a bug in the call, not a shape to run "
        "another way",
        describe_gemm(g), r.detail));
  throw DeviceError(fmt::format("{}: cuBLASLt failed ({})", describe_gemm(g), r.detail));
}

}  // namespace

size_t GemmCallKeyHash::operator()(const GemmCallKey& k) const {
  // FNV-1a over the fields (not the padding bytes).
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(static_cast<uint64_t>(v));
  mix(static_cast<uint32_t>(k.device));
  mix(uint64_t{k.trans_a} | uint64_t{k.trans_b} << 8 | uint64_t{k.tf32} << 16 |
      uint64_t{k.epilogue} << 24 | uint64_t{k.a_type} << 32 | uint64_t{k.b_type} << 40 |
      uint64_t{k.c_type} << 48 | uint64_t{k.bias_type} << 56);
  mix(uint64_t{k.align_a} | uint64_t{k.align_b} << 8 | uint64_t{k.align_c} << 16 |
      uint64_t{k.align_bias} << 24);
  return static_cast<size_t>(h);
}

GemmCallKey gemm_call_key(const GemmArgs& g, bool tf32, int device) {
  GemmCallKey k;
  k.M = g.M;
  k.N = g.N;
  k.K = g.K;
  k.lda = g.lda;
  k.ldb = g.ldb;
  k.ldc = g.ldc;
  k.device = device;
  k.trans_a = g.trans_a;
  k.trans_b = g.trans_b;
  k.tf32 = tf32;
  k.epilogue = static_cast<uint8_t>(g.epilogue);
  k.a_type = static_cast<uint8_t>(g.a_type);
  k.b_type = static_cast<uint8_t>(g.b_type);
  k.c_type = static_cast<uint8_t>(g.c_type);
  k.align_a = align_of(g.A);
  k.align_b = align_of(g.B);
  k.align_c = align_of(g.C);
  if (g.epilogue == GemmEpilogue::Bias) {
    k.bias_type = static_cast<uint8_t>(g.bias_type);
    k.align_bias = align_of(g.bias);
  } else if (g.epilogue == GemmEpilogue::BgradOpA) {
    k.bias_type = static_cast<uint8_t>(DType::F32);
    k.align_bias = align_of(g.bias_grad);
  }
  return k;
}

const char* gemm_epilogue_unfusable(const GemmArgs& g) {
  // cuBLASLt's bias and bias gradient vectors have the output's type (cublasLt.h,
  // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): another type is not offered to it.
  if (g.epilogue == GemmEpilogue::Bias && g.bias_type != g.c_type)
    return "an f32 bias with a 16-bit output (cuBLASLt's bias has the output's type)";
  if (g.epilogue == GemmEpilogue::BgradOpA && g.c_type != DType::F32)
    return "an f32 bias gradient with a 16-bit output (cuBLASLt's has the output's type)";
  if (g.epilogue == GemmEpilogue::Bias && gemm_alignment_class(g.bias) < 16)
    return "the bias is not 16-byte aligned";
  if (g.epilogue == GemmEpilogue::BgradOpA && gemm_alignment_class(g.bias_grad) < 16)
    return "bias_grad is not 16-byte aligned";
  return nullptr;
}

void run_gemm(const GemmArgs& g, bool tf32, int device, GemmBackend& backend) {
  check_gemm_args(g);
  const bool product = g.M > 0 && g.N > 0 && g.K > 0;
  const bool epilogue = g.epilogue != GemmEpilogue::None;
  if (epilogue && product) {
    const GemmCallKey key = gemm_call_key(g, tf32, device);
    if (const char* why = gemm_epilogue_unfusable(g)) {
      warn_fallback(key, g,
                    fmt::format("cuBLASLt cannot fuse the epilogue ({}); it runs as a separate "
                                "kernel after the plain GEMM",
                                why));
    } else {
      const LtResult r = backend.lt_matmul(g, key);
      if (r.status == LtStatus::Success) {
        count_gpu_path(GpuPath::GemmFused);
        return;
      }
      throw_unless_not_supported(g, r);
      warn_fallback(key, g,
                    fmt::format("cuBLASLt has no fused algorithm ({}); the epilogue runs as a "
                                "separate kernel after the plain GEMM",
                                r.detail));
    }
  }
  GemmArgs plain = g;
  plain.epilogue = GemmEpilogue::None;
  plain.bias = nullptr;
  plain.bias_type = DType::F32;
  plain.bias_grad = nullptr;
  if (g.M > 0 && g.N > 0) {
    bool done = false;
    if (product) {
      const GemmCallKey key = gemm_call_key(plain, tf32, device);
      const LtResult r = backend.lt_matmul(plain, key);
      if (r.status == LtStatus::Success) {
        count_gpu_path(epilogue ? GpuPath::GemmUnfused : GpuPath::GemmPlain);
        done = true;
      } else {
        throw_unless_not_supported(plain, r);
        warn_fallback(key, plain,
                      fmt::format("cuBLASLt has no algorithm ({}); ftune's naive "
                                  "one-thread-per-output kernel runs it (slow)",
                                  r.detail));
      }
    }
    if (!done) {
      backend.naive(plain);
      if (product) count_gpu_path(GpuPath::GemmNaive);
    }
  }
  if (epilogue) backend.unfused_epilogue(g);
}

}  // namespace ftune::cuda
