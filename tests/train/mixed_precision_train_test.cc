// Mixed precision (training.precision bf16, the CPU's emulation of the GPU numerics) in real runs:
// a tiny BERT trained with every dropout on follows the fp32 run's per-step losses within the
// DESIGN's bf16 tolerance (2e-2 relative) over 40 steps; summary.json and the log name the resolved
// precision; bf16 plans fewer activation bytes than fp32 plus a bf16 weight shadow, and a bf16 run
// touches what it plans (with and without gradient checkpointing); the micro-batch split does not
// change a bf16 trajectory; LoRA and DoRA in bf16 follow fp32 LoRA / DoRA and touch their plans
// (DoRA in fp16 trains too); fp16 skips the steps whose gradients overflow and halves its loss
// scale; training.precision errors name the key and the allowed values. `ftune plan` for a GPU
// in bf16 with cuDNN attention plans its small state per layer instead of the probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "cuda/cuda_libraries.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/precision.h"

namespace ftune::test {
namespace {

class MixedPrecisionRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 160, 4);
  }
  // Padded micro-batches (rows x longest row), whose cuts and plan these tests pin; packed ones
  // (data.packing on) are tested in packing_test.cc.
  std::string config(const std::string& run, const std::string& extra, int steps = 40) {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  max_length: 24\n  packing: off\n"
                        << "training:\n  max_steps: " << steps << "\n  effective_batch_size: 16\n"
                        << "  learning_rate: 3.0e-3\n  log_every: 1\n  threads: 2\n"
                        << "  memory_budget: 1GiB\n"
                        << "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n"
                        << "  classifier_dropout: 0.1\n"
                        << extra << "output:\n  dir: " << run_dir(run) << "\n  progress: plain\n";
    return path;
  }
  std::string run_dir(const std::string& run) { return tmp_.path() + "/" + run; }
  CliResult train(const std::string& run, const std::string& extra, int steps = 40,
                  const std::string& overrides = "") {
    const CliResult r = run_ftune("train --config " + config(run, extra, steps) + overrides);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r;
  }
  nlohmann::json summary(const std::string& run) {
    return nlohmann::json::parse(std::ifstream(run_dir(run) + "/summary.json"));
  }
  // The run touched at least 98% of its planned arena, in total and in each of `categories`.
  void expect_touched_what_planned(const std::string& run,
                                   std::initializer_list<const char*> categories) {
    const nlohmann::json m = summary(run)["memory"];
    const double planned = m["planned_bytes"].get<double>(),
                 touched = m["touched_bytes"].get<double>();
    EXPECT_LE(touched, planned);
    EXPECT_GT(touched, 0.98 * planned) << m.dump(2);
    for (const char* c : categories)
      EXPECT_GT(m["touched"][c].get<double>(), 0.98 * m["planned"][c].get<double>()) << c << "\n"
                                                                                     << m.dump(2);
  }
  nlohmann::json plan(const std::string& run, const std::string& extra) {
    const CliResult r =
        run_ftune("plan --json --config " + config(run, extra, 3), "", Streams::kStdout);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  }
  static size_t category(const nlohmann::json& plan, const std::string& name) {
    for (const auto& c : plan["categories"])
      if (c["name"] == name) return c["bytes"].get<size_t>();
    ADD_FAILURE() << "no category " << name;
    return 0;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(MixedPrecisionRun, Bf16FollowsTheFp32LossesWithDropout) {
  const std::string fixed = "  batch_size: 8\n  gradient_accumulation: 2\n";
  train("fp32", fixed + "  precision: fp32\n");
  const CliResult r = train("bf16", fixed + "  precision: bf16\n");
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("emulation"), std::string::npos) << r.output;
  EXPECT_EQ(summary("fp32")["precision"], "fp32");
  EXPECT_EQ(summary("bf16")["precision"], "bf16");
  const auto a = logged_train_losses(run_dir("fp32")), b = logged_train_losses(run_dir("bf16"));
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), a.size());
  double worst = 0;
  bool identical = true;
  for (size_t i = 0; i < a.size(); ++i) {
    const double rel = std::fabs(a[i] - b[i]) / std::fabs(a[i]);
    worst = std::max(worst, rel);
    identical = identical && a[i] == b[i];
    EXPECT_LE(rel, 2e-2) << "step " << i + 1 << ": fp32 " << a[i] << ", bf16 " << b[i];
  }
  EXPECT_FALSE(identical);               // bf16 really ran: its rounding shows in the losses
  EXPECT_LT(b.back(), 0.9 * b.front());  // and it learns
  std::printf("bf16 vs fp32 over %zu steps: largest relative loss difference %.3g\n", a.size(),
              worst);
  // The default on the CPU is fp32: the same bits as asking for it.
  train("auto", fixed);
  EXPECT_EQ(summary("auto")["precision"], "fp32");
  EXPECT_EQ(logged_train_losses(run_dir("auto")), a);
}

TEST_F(MixedPrecisionRun, Bf16PlansFewerBytesAndTouchesWhatItPlans) {
  const std::string fixed = "  batch_size: 8\n  gradient_accumulation: 2\n";
  for (const char* ckpt : {"off", "on"}) {
    SCOPED_TRACE(ckpt);
    const std::string keys = fixed + "  gradient_checkpointing: " + ckpt + "\n";
    const nlohmann::json p32 = plan("p32", keys + "  precision: fp32\n")["plan"];
    const nlohmann::json p16 = plan("p16", keys + "  precision: bf16\n")["plan"];
    EXPECT_LT(category(p16, "activations"), category(p32, "activations"));
    EXPECT_LT(category(p16, "activation gradients"), category(p32, "activation gradients"));
    EXPECT_EQ(category(p16, "attention"), category(p32, "attention"));  // probs stay fp32
    EXPECT_EQ(category(p32, "weight shadow"), 0u);
    EXPECT_GT(category(p16, "weight shadow"), 0u);
    EXPECT_EQ(category(p16, "parameters"), category(p32, "parameters"));  // fp32 master

    const std::string run = std::string("touch_") + ckpt;
    train(run, keys + "  precision: bf16\n", 10);  // one epoch: the longest rows come
    expect_touched_what_planned(
        run, {"activations", "attention", "activation gradients", "weight shadow"});
  }
}

TEST_F(MixedPrecisionRun, LoraInBf16FollowsFp32AndTouchesWhatItPlans) {
  const std::string lora =
      "  batch_size: 8\n  gradient_accumulation: 2\n  gradient_checkpointing: on\n";
  const std::string peft =
      "peft:\n  method: lora\n  r: 4\n  dropout: 0.1\n"
      "  target_modules: [query, value, intermediate.dense, output.dense]\n";
  train("lora32", lora + "  precision: fp32\n" + peft, 20);
  train("lora16", lora + "  precision: bf16\n" + peft, 20);
  EXPECT_EQ(summary("lora16")["precision"], "bf16");
  const auto a = logged_train_losses(run_dir("lora32")), b = logged_train_losses(run_dir("lora16"));
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(b[i], a[i], 2e-2 * std::fabs(a[i])) << "step " << i + 1;
  EXPECT_NE(a, b);
  // Planned vs touched (20 steps of 16 rows: every row of the 160, so the longest too).
  // The frozen layers' GEMM weights are stored once, in bf16, among the parameters: no shadow.
  expect_touched_what_planned("lora16", {"activations", "workspace", "parameters"});
  const nlohmann::json planned = summary("lora16")["memory"]["planned"];
  EXPECT_TRUE(!planned.contains("weight shadow") || planned["weight shadow"] == 0) << planned;
}

TEST_F(MixedPrecisionRun, Bf16TrajectoryDoesNotDependOnTheMicroBatch) {
  train("whole", "  batch_size: 16\n  gradient_accumulation: 1\n  precision: bf16\n", 12);
  train("split", "  batch_size: 4\n  gradient_accumulation: 4\n  precision: bf16\n", 12);
  const auto a = logged_train_losses(run_dir("whole")), b = logged_train_losses(run_dir("split"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(b[i], a[i], 1e-3 * std::fabs(a[i])) << "step " << i + 1;
}

TEST_F(MixedPrecisionRun, PrecisionErrorsNameTheKey) {
  auto fails = [&](const std::string& run, const std::string& extra) {
    const CliResult r = run_ftune("train --config " + config(run, extra));
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("training.precision"), std::string::npos) << r.output;
    return r.output;
  };
  const std::string bad = fails("bad", "  precision: fp8\n");
  EXPECT_NE(bad.find("auto, fp32, bf16, fp16"), std::string::npos) << bad;
  EXPECT_NE(bad.find("fp8"), std::string::npos) << bad;
}

TEST_F(MixedPrecisionRun, DoraInBf16FollowsFp32AndTouchesWhatItPlans) {
  const std::string fixed =
      "  batch_size: 8\n  gradient_accumulation: 2\n  gradient_checkpointing: on\n";
  const std::string peft =
      "peft:\n  method: dora\n  r: 4\n"
      "  target_modules: [query, key, value, attention.output.dense, intermediate.dense]\n";
  // A faster learning rate than the other runs: DoRA's few parameters then move the loss.
  const std::string lr = " training.learning_rate=2e-2";
  train("dora32", fixed + "  precision: fp32\n" + peft, 20, lr);
  const CliResult r = train("dora16", fixed + "  precision: bf16\n" + peft, 20, lr);
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;
  EXPECT_EQ(summary("dora16")["precision"], "bf16");
  const auto a = logged_train_losses(run_dir("dora32")), b = logged_train_losses(run_dir("dora16"));
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), a.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(a[i]));
    EXPECT_NEAR(b[i], a[i], 2e-2 * std::fabs(a[i])) << "step " << i + 1;
  }
  EXPECT_NE(a, b);
  EXPECT_LT(b.back(), b.front());
  std::printf("DoRA bf16 vs fp32 over %zu steps: largest relative loss difference %.3g\n", a.size(),
              worst);
  // Planned vs touched (20 steps of 16 rows: every row of the 160, so the longest too).
  expect_touched_what_planned("dora16", {"activations", "workspace", "weight shadow"});
  // fp16 (with its loss scaling) trains DoRA as well.
  train("dora_fp16", fixed + "  precision: fp16\n" + peft, 4);
  EXPECT_EQ(summary("dora_fp16")["precision"], "fp16");
  for (double l : logged_train_losses(run_dir("dora_fp16"))) EXPECT_TRUE(std::isfinite(l));
}

TEST_F(MixedPrecisionRun, Fp16SkipsOverflowingStepsAndHalvesTheLossScale) {
  // Starting from a loss scale of 2^28 the fp16 activation gradients overflow (fp16's largest
  // value is 65504): those steps are skipped with the weights untouched and the scale halves until
  // the gradients fit; then it trains.
  const std::string cfg =
      config("fp16", "  batch_size: 8\n  gradient_accumulation: 2\n  precision: fp16\n", 30);
  const CliResult r = run_ftune("train --config " + cfg, "FTUNE_DEBUG_LOSS_SCALE=28");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("precision fp16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fp16 gradients overflow at loss scale"), std::string::npos) << r.output;
  const nlohmann::json s = summary("fp16");
  EXPECT_EQ(s["precision"], "fp16");
  const int64_t skipped = s["skipped_steps"].get<int64_t>();
  EXPECT_GE(skipped, 1);
  EXPECT_LE(skipped, 20);
  const auto losses = logged_train_losses(run_dir("fp16"));
  ASSERT_EQ(losses.size(), 30u);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), 0.9 * losses.front());
  std::printf("fp16 from loss scale 2^28: %lld steps skipped\n", static_cast<long long>(skipped));
}

TEST(Tf32, AutoIsOnWithMixedPrecisionOffInFp32AndNeverOnTheCpu) {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  EXPECT_TRUE(resolve_tf32("auto", gpu, Precision::BF16).on);
  EXPECT_TRUE(resolve_tf32("auto", gpu, Precision::FP16).on);
  EXPECT_FALSE(resolve_tf32("auto", gpu, Precision::FP32).on);
  EXPECT_TRUE(resolve_tf32("on", gpu, Precision::FP32).on);
  EXPECT_FALSE(resolve_tf32("off", gpu, Precision::BF16).on);
  for (const char* v : {"auto", "on", "off"}) EXPECT_FALSE(resolve_tf32(v, cpu, Precision::BF16).on);
}

TEST(AttentionKernel, AutoIsCudnnOnlyFor16BitOnAGpuThatHasItAndCudnnFailsClearlyElsewhere) {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  EXPECT_EQ(resolve_attention("auto", gpu, Precision::BF16, true).kernel, AttentionKernel::Cudnn);
  EXPECT_EQ(resolve_attention("auto", gpu, Precision::FP16, true).kernel, AttentionKernel::Cudnn);
  EXPECT_EQ(resolve_attention("auto", gpu, Precision::FP32, true).kernel, AttentionKernel::Ftune);
  EXPECT_EQ(resolve_attention("auto", gpu, Precision::BF16, false).kernel, AttentionKernel::Ftune);
  EXPECT_EQ(resolve_attention("auto", cpu, Precision::BF16, true).kernel, AttentionKernel::Ftune);
  EXPECT_EQ(resolve_attention("ftune", gpu, Precision::BF16, true).kernel, AttentionKernel::Ftune);
  EXPECT_EQ(resolve_attention("cudnn", gpu, Precision::BF16, true).kernel, AttentionKernel::Cudnn);
  auto fails = [](const std::string& value, Device d, Precision p, bool built, const char* what) {
    try {
      resolve_attention(value, d, p, built);
      ADD_FAILURE() << value << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("training.attention"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails("cudnn", cpu, Precision::BF16, true, "needs a CUDA device");
  fails("cudnn", gpu, Precision::FP32, true, "needs training.precision bf16 or fp16");
  fails("cudnn", gpu, Precision::BF16, false, "this build has no cuDNN attention");
  fails("flash", gpu, Precision::BF16, true, "auto, ftune, cudnn");
}

TEST(AttentionKernel, RequiredCudnnTurnsAMissingCudnnIntoAnError) {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  ScopedEnv required("FTUNE_REQUIRE_CUDNN", "1");
  try {
    resolve_attention("auto", gpu, Precision::BF16, /*cudnn_built=*/false);
    ADD_FAILURE() << "auto without cuDNN accepted although FTUNE_REQUIRE_CUDNN=1";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("FTUNE_REQUIRE_CUDNN=1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(cuda::cudnn_sdpa_build_note()), std::string::npos)
        << e.what();
  }
  // Where cuDNN is not asked for, nothing changes.
  EXPECT_EQ(resolve_attention("auto", cpu, Precision::BF16, false).kernel, AttentionKernel::Ftune);
  EXPECT_EQ(resolve_attention("auto", gpu, Precision::FP32, false).kernel, AttentionKernel::Ftune);
  EXPECT_EQ(resolve_attention("ftune", gpu, Precision::BF16, false).kernel,
            AttentionKernel::Ftune);
  ScopedEnv off("FTUNE_REQUIRE_CUDNN", "0");
  EXPECT_EQ(resolve_attention("auto", gpu, Precision::BF16, false).kernel, AttentionKernel::Ftune);
}

TEST_F(MixedPrecisionRun, AttentionKeyIsValidatedAndTheCpuRunsFtunesKernel) {
  const CliResult r = run_ftune("train --config " + config("attn_bad", "  attention: flash\n"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training.attention"), std::string::npos) << r.output;
  const CliResult c = run_ftune("train --config " + config("attn_cpu", "  attention: cudnn\n"));
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("needs a CUDA device"), std::string::npos) << c.output;
  train("attn_auto", "  precision: bf16\n", 2);
  EXPECT_EQ(summary("attn_auto")["attention"], "ftune");
  EXPECT_NE(summary("attn_auto")["attention_memory"].get<std::string>().find("saved for backward"),
            std::string::npos);
}

TEST_F(MixedPrecisionRun, GpuPlanWithCudnnAttentionStoresNoProbabilities) {
  // A plan for a GPU of 24 GiB (--memory: no GPU needed), bf16, 16 rows: ftune's kernel plans the
  // (B, H, T, T) probabilities per layer, cuDNN (auto, where this build has it) only its state.
  auto gpu_plan = [&](const std::string& run, const std::string& attention, bool json) {
    const CliResult r =
        run_ftune(std::string("plan ") + (json ? "--json " : "") + "--memory 24GiB --config " +
                  config(run, "  batch_size: 16\n  precision: bf16\n", 3) +
                  " training.device=cuda training.attention=" + attention);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  auto parse = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.find("{\n")));
  };
  const nlohmann::json ftune = parse(gpu_plan("plan_ftune", "ftune", true));
  const nlohmann::json autop = parse(gpu_plan("plan_auto", "auto", true));
  EXPECT_EQ(ftune["attention"], "ftune");
  auto note = [](const nlohmann::json& plan) {
    for (const auto& c : plan["categories"])
      if (c["name"] == "attention") return c["note"].get<std::string>();
    return std::string();
  };
  EXPECT_EQ(note(ftune["plan"]).find("not stored"), std::string::npos);
  if (!cuda::cudnn_sdpa_compiled()) {
    EXPECT_EQ(autop["attention"], "ftune");
    FTUNE_SKIP_OR_REQUIRE_CUDNN("no cuDNN attention in this build: " +
                                cuda::cudnn_sdpa_build_note());
  }
  if (autop["attention"] == "ftune") {
    // A GPU is here and cuDNN refused the run's largest attention: planned for ftune's kernel
    // (an error where FTUNE_REQUIRE_CUDNN=1 says cuDNN must run it).
    ASSERT_GT(cuda_device_count(), 0) << autop.dump(2);
    EXPECT_FALSE(cudnn_required_by_env()) << autop["attention_reason"];
    EXPECT_NE(autop["attention_reason"].get<std::string>().find("refused"), std::string::npos);
    EXPECT_EQ(autop["plan"], ftune["plan"]);
    return;
  }
  EXPECT_EQ(autop["attention"], "cudnn");
  const int64_t rows = 16, H = 4, T = autop["max_seq"].get<int64_t>(), layers = 2;
  EXPECT_EQ(category(ftune["plan"], "attention"), size_t(layers * rows * H * T * T * 4));
  EXPECT_LT(category(autop["plan"], "attention"), size_t(layers * (rows * H * T * 4 + 1024)));
  EXPECT_NE(note(autop["plan"]).find("not stored"), std::string::npos);
  for (const char* c : {"activations", "parameters", "weight shadow", "activation gradients"})
    EXPECT_EQ(category(autop["plan"], c), category(ftune["plan"], c)) << c;
  EXPECT_GE(autop["largest_micro_batch"]["without_checkpointing"].get<int64_t>(),
            ftune["largest_micro_batch"]["without_checkpointing"].get<int64_t>());
  const std::string text = gpu_plan("plan_text", "auto", false);
  EXPECT_NE(text.find("attention kernel cudnn"), std::string::npos) << text;
  EXPECT_NE(text.find("probabilities are not stored"), std::string::npos) << text;
}

TEST_F(MixedPrecisionRun, Tf32ErrorsNameTheKeyAndTheSummaryRecordsIt) {
  const CliResult r = run_ftune("train --config " + config("tf32_bad", "  tf32: yes\n"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training.tf32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("auto, on, off"), std::string::npos) << r.output;
  train("tf32_cpu", "  tf32: on\n", 2);
  EXPECT_EQ(summary("tf32_cpu")["tf32"], false);  // the CPU has no TF32
}

}  // namespace
}  // namespace ftune::test
