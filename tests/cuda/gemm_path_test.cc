// The GEMM path policy (cuda/gemm_path.h) with a scripted cuBLASLt, on any machine: the fused
// epilogue when cuBLASLt takes it; the plain GEMM plus the epilogue's own kernel when it answers
// NOT_SUPPORTED or the vectors are misaligned (one warning per shape); the naive kernel when even
// the plain GEMM has no algorithm; an argument error (INVALID_VALUE) or any other failure thrown,
// never turned into a fallback; and each path counted (core/gpu_paths.h).
#include "cuda/gemm_path.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/gpu_paths.h"

namespace ftune::cuda {
namespace {

void* addr(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}

// dW (OC, C) += dout^T (OC, T) @ x (T, C) with the bias gradient, bf16 operands, fp32 C: the call
// a linear layer's backward makes. `m` varies the shape (each test its own, so warnings are new).
GemmArgs bgrad_call(int64_t m) {
  GemmArgs g;
  g.trans_a = true;
  g.M = m;
  g.N = 64;
  g.K = 256;
  g.beta = 1.0f;
  g.A = addr(0x100000);
  g.a_type = DType::BF16;
  g.lda = m;
  g.B = addr(0x200000);
  g.b_type = DType::BF16;
  g.ldb = 64;
  g.C = addr(0x300000);
  g.c_type = DType::F32;
  g.ldc = 64;
  g.epilogue = GemmEpilogue::BgradOpA;
  g.bias_grad = static_cast<float*>(addr(0x400000));
  return g;
}

// Answers lt_matmul from a script: the fused call (epilogue set) and the plain one separately.
struct Script final : GemmBackend {
  LtResult fused, plain;
  std::vector<std::string> calls;
  LtResult lt_matmul(const GemmArgs& g, const GemmCallKey& key) override {
    const bool with_epilogue = g.epilogue != GemmEpilogue::None;
    EXPECT_EQ(key, gemm_call_key(g, false, 0));
    calls.push_back(with_epilogue ? "lt fused" : "lt plain");
    return with_epilogue ? fused : plain;
  }
  void naive(const GemmArgs& g) override {
    EXPECT_EQ(g.epilogue, GemmEpilogue::None);
    calls.push_back("naive");
  }
  void unfused_epilogue(const GemmArgs& g) override {
    calls.push_back(std::string("epilogue ") + std::string(gemm_epilogue_name(g.epilogue)));
  }
};

using Calls = std::vector<std::string>;

// Captures what spdlog logs while it lives.
class LogCapture {
 public:
  LogCapture() : old_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(old_); }
  std::string text() const { return out_.str(); }
  int count(const std::string& what) const {
    int n = 0;
    const std::string s = out_.str();
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> old_;
};

TEST(GemmPath, TheFusedEpilogueWhenCublasLtTakesIt) {
  const GpuPathCounts before = gpu_path_counts();
  Script s;
  run_gemm(bgrad_call(96), false, 0, s);
  EXPECT_EQ(s.calls, Calls{"lt fused"});
  const GpuPathCounts d = gpu_path_counts() - before;
  EXPECT_EQ(d[GpuPath::GemmFused], 1);
  EXPECT_EQ(d[GpuPath::GemmUnfused] + d[GpuPath::GemmNaive] + d[GpuPath::GemmPlain], 0);
}

TEST(GemmPath, NotSupportedRunsThePlainGemmAndTheEpilogueKernelWarningOncePerShape) {
  LogCapture log;
  const GpuPathCounts before = gpu_path_counts();
  Script s;
  s.fused = {LtStatus::NotSupported, "cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_NOT_SUPPORTED"};
  for (int i = 0; i < 3; ++i) run_gemm(bgrad_call(104), false, 0, s);
  EXPECT_EQ(s.calls, (Calls{"lt fused", "lt plain", "epilogue bgrad_op_a", "lt fused", "lt plain",
                            "epilogue bgrad_op_a", "lt fused", "lt plain", "epilogue bgrad_op_a"}));
  EXPECT_EQ((gpu_path_counts() - before)[GpuPath::GemmUnfused], 3);
  EXPECT_EQ(log.count("CUBLAS_STATUS_NOT_SUPPORTED"), 1) << log.text();
  EXPECT_NE(log.text().find("epilogue bgrad_op_a"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("separate kernel"), std::string::npos) << log.text();
}

TEST(GemmPath, AMisalignedVectorIsNotOfferedToCublasLt) {
  LogCapture log;
  const GpuPathCounts before = gpu_path_counts();
  Script s;
  GemmArgs g = bgrad_call(112);
  g.bias_grad = static_cast<float*>(addr(0x400004));  // 4-byte aligned only
  run_gemm(g, false, 0, s);
  EXPECT_EQ(s.calls, (Calls{"lt plain", "epilogue bgrad_op_a"}));
  EXPECT_EQ((gpu_path_counts() - before)[GpuPath::GemmUnfused], 1);
  EXPECT_NE(log.text().find("bias_grad is not 16-byte aligned"), std::string::npos) << log.text();
}

TEST(GemmPath, VectorsOfAnotherTypeThanTheOutputAreNotOfferedToCublasLt) {
  LogCapture log;
  Script s;
  GemmArgs g = bgrad_call(116);
  g.c_type = DType::BF16;  // a 16-bit C: cuBLASLt's bias gradient would be 16-bit
  run_gemm(g, false, 0, s);
  EXPECT_EQ(s.calls, (Calls{"lt plain", "epilogue bgrad_op_a"}));
  GemmArgs f;  // an f32 bias on a bf16 output
  f.trans_b = true;
  f.M = 116, f.N = 64, f.K = 32;
  f.A = addr(0x100000), f.a_type = DType::BF16, f.lda = 32;
  f.B = addr(0x200000), f.b_type = DType::BF16, f.ldb = 32;
  f.C = addr(0x300000), f.c_type = DType::BF16, f.ldc = 64;
  f.epilogue = GemmEpilogue::Bias;
  f.bias = addr(0x400000);
  s.calls.clear();
  run_gemm(f, false, 0, s);
  EXPECT_EQ(s.calls, (Calls{"lt plain", "epilogue bias"}));
  f.bias_type = DType::BF16;  // the bias's own 16-bit shadow: fused
  s.calls.clear();
  run_gemm(f, false, 0, s);
  EXPECT_EQ(s.calls, Calls{"lt fused"});
  EXPECT_NE(log.text().find("output's type"), std::string::npos) << log.text();
}

TEST(GemmPath, NoAlgorithmAtAllRunsTheNaiveKernel) {
  LogCapture log;
  const GpuPathCounts before = gpu_path_counts();
  Script s;
  s.fused = s.plain = {LtStatus::NotSupported, "cublasLtMatmulAlgoGetHeuristic: no algorithm"};
  run_gemm(bgrad_call(120), false, 0, s);
  EXPECT_EQ(s.calls, (Calls{"lt fused", "lt plain", "naive", "epilogue bgrad_op_a"}));
  GemmArgs plain = bgrad_call(120);
  plain.epilogue = GemmEpilogue::None;
  plain.bias_grad = nullptr;
  run_gemm(plain, false, 0, s);
  const GpuPathCounts d = gpu_path_counts() - before;
  EXPECT_EQ(d[GpuPath::GemmNaive], 2);
  EXPECT_EQ(d[GpuPath::GemmFused] + d[GpuPath::GemmUnfused] + d[GpuPath::GemmPlain], 0);
  EXPECT_NE(log.text().find("naive"), std::string::npos) << log.text();
}

TEST(GemmPath, AnArgumentErrorThrowsAndNeverFallsBack) {
  for (const bool in_fused : {true, false}) {
    Script s;
    const LtResult invalid{LtStatus::InvalidValue, "cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE"};
    if (in_fused) {
      s.fused = invalid;
    } else {
      s.fused = {LtStatus::NotSupported, "no fused algorithm"};
      s.plain = invalid;
    }
    const GpuPathCounts before = gpu_path_counts();
    try {
      run_gemm(bgrad_call(128), false, 0, s);
      ADD_FAILURE() << "an INVALID_VALUE answer did not throw";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("rejected the arguments"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("M=128"), std::string::npos) << e.what();
    }
    for (const std::string& c : s.calls) {
      EXPECT_NE(c, "naive");
      EXPECT_NE(c, "epilogue bgrad_op_a");
    }
    const GpuPathCounts d = gpu_path_counts() - before;
    EXPECT_EQ(d[GpuPath::GemmNaive] + d[GpuPath::GemmUnfused], 0);
  }
}

TEST(GemmPath, AnyOtherFailureThrows) {
  Script s;
  s.fused = {LtStatus::Failed, "cublasLtMatmul: CUBLAS_STATUS_EXECUTION_FAILED"};
  EXPECT_THROW(run_gemm(bgrad_call(136), false, 0, s), DeviceError);
  EXPECT_EQ(s.calls, Calls{"lt fused"});
}

TEST(GemmPath, APlainCallIsCountedPlainAndZeroKNeedsNoCublasLt) {
  const GpuPathCounts before = gpu_path_counts();
  Script s;
  GemmArgs g = bgrad_call(144);
  g.epilogue = GemmEpilogue::None;
  g.bias_grad = nullptr;
  run_gemm(g, false, 0, s);
  EXPECT_EQ((gpu_path_counts() - before)[GpuPath::GemmPlain], 1);
  s.calls.clear();
  GemmArgs zero_k = bgrad_call(144);  // bias_grad of no rows: 0; C = beta C
  zero_k.K = 0;
  run_gemm(zero_k, false, 0, s);
  EXPECT_EQ(s.calls, (Calls{"naive", "epilogue bgrad_op_a"}));
  EXPECT_EQ((gpu_path_counts() - before)[GpuPath::GemmNaive], 0);  // not a fallback
}

TEST(GemmPath, ArgumentsAreCheckedBeforeCublasLtIsAsked) {
  Script s;
  GemmArgs g = bgrad_call(152);
  g.trans_a = false;
  EXPECT_THROW(run_gemm(g, false, 0, s), ShapeError);
  EXPECT_TRUE(s.calls.empty());
}

TEST(GemmCallKey, EveryFieldChangesTheKeyAndItsHashIsStable) {
  const GemmArgs base = bgrad_call(96);
  const GemmCallKey k = gemm_call_key(base, false, 0);
  EXPECT_EQ(k, gemm_call_key(base, false, 0));
  EXPECT_EQ(GemmCallKeyHash{}(k), GemmCallKeyHash{}(gemm_call_key(base, false, 0)));
  std::vector<GemmCallKey> keys{k, gemm_call_key(base, true, 0), gemm_call_key(base, false, 1)};
  auto vary = [&](auto&& change) {
    GemmArgs g = base;
    change(g);
    keys.push_back(gemm_call_key(g, false, 0));
  };
  vary([](GemmArgs& g) { g.M = 97; });
  vary([](GemmArgs& g) { g.N = 65; });
  vary([](GemmArgs& g) { g.K = 257; });
  vary([](GemmArgs& g) { g.lda = 100; });
  vary([](GemmArgs& g) { g.ldb = 72; });
  vary([](GemmArgs& g) { g.ldc = 72; });
  vary([](GemmArgs& g) { g.trans_b = true; });
  vary([](GemmArgs& g) { g.a_type = g.b_type = DType::F16; });
  vary([](GemmArgs& g) { g.c_type = DType::BF16; });
  vary([](GemmArgs& g) { g.A = addr(0x100008); });
  vary([](GemmArgs& g) { g.B = addr(0x200008); });
  vary([](GemmArgs& g) { g.C = addr(0x300008); });
  vary([](GemmArgs& g) { g.bias_grad = static_cast<float*>(addr(0x400008)); });
  vary([](GemmArgs& g) {
    g.epilogue = GemmEpilogue::None;
    g.bias_grad = nullptr;
  });
  for (size_t i = 0; i < keys.size(); ++i)
    for (size_t j = i + 1; j < keys.size(); ++j) EXPECT_FALSE(keys[i] == keys[j]) << i << " " << j;
  // The same alignment class at another address is the same key (the plan is reused).
  GemmArgs moved = base;
  moved.A = addr(0x900000);
  moved.bias_grad = static_cast<float*>(addr(0x800010));
  EXPECT_EQ(gemm_call_key(moved, false, 0), k);
}

}  // namespace
}  // namespace ftune::cuda
