// `ftune doctor`: the optimisation rules on made-up devices (doctor_report.h: sm_90, sm_75,
// cuDNN attention compiled or not, NVML missing), and the command line on this machine with no
// CUDA device visible (CUDA_VISIBLE_DEVICES=-1): it says so, lists every optimisation with a
// reason, reads NVML through FTUNE_NVML_LIBRARY (the fake library), reports a --config's choices,
// and fails naming the key of a bad configuration.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/doctor_report.h"
#include "ops/cpu_gemm_library.h"
#include "run_cli.h"
#include "test_util.h"

namespace ftune::cli {
namespace {

const OptimisationState* find(const std::vector<OptimisationState>& states,
                              const std::string& name) {
  for (const OptimisationState& s : states)
    if (s.name == name) return &s;
  return nullptr;
}

DoctorFacts h100() {
  DoctorFacts f;
  f.device = Device::cuda(0);
  f.device_visible = true;
  f.sm_major = 9;
  f.sm_minor = 0;
  f.bf16 = f.tf32 = f.fp16 = true;
  f.nvml_available = true;
  f.cudnn_sdpa_note = "cudnn_frontend.h not found";
  f.cudnn_runtime = true;
  f.cudnn_detail = "9.26.0";
  return f;
}

TEST(DoctorReport, HopperGetsBf16AndSaysWhy) {
  const TrainConfig cfg;
  const DoctorFacts f = h100();
  const auto states = optimisation_states(f, cfg);
  const OptimisationState* bf16 = find(states, "bf16 mixed precision");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->state, "on");
  EXPECT_EQ(bf16->reason, "auto: cuda:0 has bf16 tensor cores");
  const OptimisationState* tf32 = find(states, "TF32 for fp32 GEMMs");
  ASSERT_NE(tf32, nullptr);
  EXPECT_EQ(tf32->state, "on");
  EXPECT_NE(tf32->reason.find("auto: bf16 precision"), std::string::npos) << tf32->reason;
  // fp32 precision (the parity mode) keeps TF32 off unless asked for.
  TrainConfig fp32 = cfg;
  fp32.training.precision = PrecisionSetting::FP32;
  const auto exact = optimisation_states(f, fp32);
  EXPECT_EQ(find(exact, "mixed precision (bf16/fp16)")->state, "off");
  EXPECT_EQ(find(exact, "TF32 for fp32 GEMMs")->state, "off");
  fp32.training.tf32 = Switch::On;
  EXPECT_EQ(find(optimisation_states(f, fp32), "TF32 for fp32 GEMMs")->state, "on");
  const OptimisationState* flash = find(states, "flash attention (cuDNN)");
  ASSERT_NE(flash, nullptr);
  EXPECT_EQ(flash->state, "off");
  EXPECT_EQ(flash->reason, "not compiled: cudnn_frontend.h not found");
  EXPECT_EQ(find(states, "fused AdamW")->state, "on");
  EXPECT_NE(find(states, "fused AdamW")->reason.find("one kernel launch"), std::string::npos);
  EXPECT_EQ(find(states, "gradient checkpointing")->state, "auto");
  EXPECT_EQ(find(states, "CUDA graphs")->state, "on");
  EXPECT_EQ(find(states, "padding to a multiple")->state, "on");
  EXPECT_NE(find(states, "padding to a multiple")->reason.find("length buckets"),
            std::string::npos);
  TrainConfig no_graphs = cfg;
  no_graphs.training.cuda_graphs = Switch::Off;
  no_graphs.training.pad_to_multiple_of = 1;
  const auto eager = optimisation_states(f, no_graphs);
  EXPECT_EQ(find(eager, "CUDA graphs")->state, "off");
  EXPECT_EQ(find(eager, "padding to a multiple")->state, "off");
  EXPECT_EQ(find(states, "pinned staging / copy stream")->state, "on");
  EXPECT_EQ(find(states, "no host sync per step")->state, "on");
  EXPECT_EQ(find(states, "NVML sampling")->state, "on");
  for (const OptimisationState& s : states) EXPECT_FALSE(s.reason.empty()) << s.name;
}

TEST(DoctorReport, CudnnAttentionIsOnWithBf16WhereBuiltAndOffForParity) {
  DoctorFacts f = h100();
  f.cudnn_sdpa_compiled = true;
  TrainConfig cfg;
  const auto states = optimisation_states(f, cfg);
  const OptimisationState* flash = find(states, "flash attention (cuDNN)");
  ASSERT_NE(flash, nullptr);
  EXPECT_EQ(flash->state, "on");
  EXPECT_NE(flash->reason.find("auto: bf16 on a GPU: cuDNN flash attention"), std::string::npos)
      << flash->reason;
  EXPECT_NE(flash->reason.find("probabilities are not stored"), std::string::npos)
      << flash->reason;
  const auto state_with = [&](const char* attention, const char* precision) {
    TrainConfig c;
    c.training.attention = parse_choice<AttentionSetting>(attention, "training.attention");
    c.training.precision = parse_choice<PrecisionSetting>(precision, "training.precision");
    return find(optimisation_states(f, c), "flash attention (cuDNN)")->state;  // a copy
  };
  EXPECT_EQ(state_with("ftune", "auto"), "off");
  EXPECT_EQ(state_with("auto", "fp32"), "off");
  EXPECT_EQ(state_with("cudnn", "fp32"), "error");
}

TEST(DoctorReport, TuringGetsFp16AndNoTf32) {
  DoctorFacts f = h100();
  f.sm_major = 7;
  f.sm_minor = 5;
  f.bf16 = f.tf32 = false;
  f.nvml_available = false;
  f.nvml_reason = "libnvidia-ml.so.1: cannot open shared object file";
  f.cudnn_sdpa_compiled = true;
  const auto states = optimisation_states(f, TrainConfig{});
  ASSERT_NE(find(states, "fp16 mixed precision + loss scaling"), nullptr);
  EXPECT_EQ(find(states, "fp16 mixed precision + loss scaling")->state, "on");
  EXPECT_EQ(find(states, "no host sync per step")->state, "off");  // the host follows the scale
  EXPECT_EQ(find(states, "TF32 for fp32 GEMMs")->state, "unavailable");
  EXPECT_EQ(find(states, "TF32 for fp32 GEMMs")->reason, "sm_75 has no TF32 tensor cores");
  EXPECT_EQ(find(states, "flash attention (cuDNN)")->state, "unavailable");
  EXPECT_EQ(find(states, "NVML sampling")->state, "unavailable");
  EXPECT_EQ(find(states, "NVML sampling")->reason, f.nvml_reason);
}

TEST(DoctorReport, FollowsTheConfigAndTheCpu) {
  TrainConfig cfg;
  cfg.training.batch_size = 8;
  cfg.training.effective_batch_size = 32;
  cfg.training.gradient_checkpointing = GradientCheckpointing::On;
  cfg.training.prefetch = 0;
  DoctorFacts f;  // the CPU
  const auto states = optimisation_states(f, cfg);
  EXPECT_EQ(find(states, "mixed precision (bf16/fp16)")->state, "off");
  EXPECT_EQ(find(states, "mixed precision (bf16/fp16)")->reason, "auto: the CPU computes in fp32");
  EXPECT_EQ(find(states, "micro-batch from the memory plan")->state, "off");
  EXPECT_EQ(find(states, "micro-batch from the memory plan")->reason,
            "training.batch_size 8 fixed, accumulation to effective batch 32");
  EXPECT_EQ(find(states, "gradient checkpointing")->state, "on");
  EXPECT_EQ(find(states, "input prefetch")->state, "off");
  EXPECT_EQ(find(states, "NVML sampling")->state, "off");
  EXPECT_EQ(find(states, "CUDA graphs")->state, "off");
  EXPECT_EQ(find(states, "padding to a multiple")->state, "off");
  cfg.training.cuda_graphs = Switch::On;  // a GPU matter
  EXPECT_EQ(find(optimisation_states(f, cfg), "CUDA graphs")->state, "error");
  cfg.training.cuda_graphs = Switch::Auto;
  const std::string text = format_optimisations(states);
  EXPECT_NE(
      text.find("  gradient checkpointing            on   training.gradient_checkpointing on\n"),
      std::string::npos)
      << text;
}

TEST(DoctorReport, InvisibleGpuIsUnknownNotGuessed) {
  DoctorFacts f;
  f.device = Device::cuda(3);
  const auto states = optimisation_states(f, TrainConfig{});
  EXPECT_EQ(find(states, "mixed precision (bf16/fp16)")->state, "unknown");
  EXPECT_EQ(find(states, "NVML sampling")->reason, "cuda:3 is not visible here");
}

class DoctorCli : public ::testing::Test {
 protected:
  std::string config(const std::string& training = "") {
    const std::string path = tmp_.path() + "/config.yaml";
    std::ofstream(path) << "model:\n  path: " << tmp_.path()
                        << "/model\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\ntraining:\n  epochs: 1\n"
                        << training;
    return path;
  }
  test::TempDir tmp_;
};

constexpr const char* kNoGpu = "CUDA_VISIBLE_DEVICES=-1 FTUNE_NVML_LIBRARY=/nonexistent/libnvml.so";

TEST_F(DoctorCli, NoCudaDeviceSaysSoAndListsEveryOptimisationWithAReason) {
  const test::CliResult r = test::run_ftune("doctor", kNoGpu);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"cuDNN flash attention: ", "NVML: unavailable: /nonexistent/libnvml.so",
        "optimisations on cpu (no CUDA device, so the CPU; default configuration):",
        "  mixed precision (bf16/fp16)  ", "  TF32 for fp32 GEMMs  ", "  fused AdamW  ",
        "  flash attention (cuDNN)  ", "  gradient checkpointing  ",
        "  micro-batch from the memory plan  ", "  NVML sampling  "})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
#ifdef FTUNE_WITH_CUDA
  EXPECT_NE(r.output.find("cuda devices: none visible (no CUDA device"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cuBLASLt: "), std::string::npos) << r.output;
#else
  EXPECT_NE(r.output.find("cuda devices: none (CUDA backend not built)"), std::string::npos)
      << r.output;
#endif
}

TEST_F(DoctorCli, ShowsTheCpuGemmLibraryAndRefusesAnUnknownOne) {
  const test::CliResult openblas = test::run_ftune("doctor", std::string(kNoGpu) +
                                   " FTUNE_CPU_GEMM=openblas OPENBLAS_CORETYPE=Prescott");
  ASSERT_EQ(openblas.exit_code, 0) << openblas.output;
  // A user's OPENBLAS_CORETYPE is kept (ftune only sets it when unset).
  EXPECT_NE(openblas.output.find("cpu gemm: openblas (OpenBLAS core Prescott"), std::string::npos)
      << openblas.output;
  if (cpu::onednn_available()) {
    const test::CliResult onednn =
        test::run_ftune("doctor", std::string(kNoGpu) + " FTUNE_CPU_GEMM=onednn");
    ASSERT_EQ(onednn.exit_code, 0) << onednn.output;
    EXPECT_NE(onednn.output.find("cpu gemm: onednn (oneDNN "), std::string::npos) << onednn.output;
  }
  // Without oneDNN, auto is OpenBLAS and asking for oneDNN is an error that says why.
  const std::string missing = std::string(kNoGpu) + " FTUNE_ONEDNN_LIBRARY=/nonexistent/libdnnl.so";
  const test::CliResult fallback = test::run_ftune("doctor", missing);
  ASSERT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_NE(fallback.output.find("cpu gemm: openblas (OpenBLAS core "), std::string::npos)
      << fallback.output;
  EXPECT_NE(fallback.output.find("other: oneDNN unavailable: /nonexistent/libdnnl.so could not"),
            std::string::npos)
      << fallback.output;
  const test::CliResult refused = test::run_ftune("doctor", missing + " FTUNE_CPU_GEMM=onednn");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("FTUNE_CPU_GEMM is 'onednn', but oneDNN cannot be used"),
            std::string::npos)
      << refused.output;
  // `ftune bench --cpu-gemm` takes the same names, before reading its configuration.
  const test::CliResult bench = test::run_ftune("bench --config /nonexistent.yaml --cpu-gemm mkl");
  EXPECT_EQ(bench.exit_code, 2) << bench.output;
  EXPECT_NE(bench.output.find("--cpu-gemm is 'mkl': expected openblas, onednn or auto"),
            std::string::npos)
      << bench.output;
  const test::CliResult bad =
      test::run_ftune("doctor", std::string(kNoGpu) + " FTUNE_CPU_GEMM=mkl");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("FTUNE_CPU_GEMM is 'mkl': expected openblas, onednn or auto"),
            std::string::npos)
      << bad.output;
}

TEST_F(DoctorCli, ReadsNvmlThroughTheConfiguredLibrary) {
  const test::CliResult r = test::run_ftune(
      "doctor", "CUDA_VISIBLE_DEVICES=-1 FTUNE_NVML_LIBRARY=" + test::fake_nvml_library());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("NVML: available (driver 580.65.06, " + test::fake_nvml_library() + ")"),
      std::string::npos)
      << r.output;
}

TEST_F(DoctorCli, ReportsTheChoicesOfAConfig) {
  const test::CliResult r =
      test::run_ftune("doctor --config " + config("  batch_size: 8\n") +
                          " training.gradient_checkpointing=on training.device=cpu",
                      kNoGpu);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"  device: cpu\n", "  precision: fp32",
                           "  batch: micro-batch 8, effective batch 8, gradient checkpointing on",
                           "optimisations on cpu (training.device of ",
                           "training.batch_size 8 fixed", "training.gradient_checkpointing on\n"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

TEST_F(DoctorCli, AGpuThatIsNotVisibleIsReportedNotFatal) {
  const test::CliResult r =
      test::run_ftune("doctor --config " + config() + " training.device=cuda:7", kNoGpu);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  device: cuda:7 — not usable here: key 'training.device' is 'cuda:7'"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cuda:7 is not visible here"), std::string::npos) << r.output;
}

TEST_F(DoctorCli, BadConfigFailsNamingTheKey) {
  const test::CliResult r =
      test::run_ftune("doctor --config " + config("  learnin_rate: 1.0e-3\n"), kNoGpu);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown key 'training.learnin_rate' (did you mean "
                          "'training.learning_rate'?)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("config.yaml"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("optimisations"), std::string::npos) << r.output;  // nothing half-done

  const test::CliResult bare = test::run_ftune("doctor training.device=cpu", kNoGpu);
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_NE(bare.output.find("overrides ('training.device=cpu') need --config"), std::string::npos)
      << bare.output;
}

}  // namespace
}  // namespace ftune::cli
