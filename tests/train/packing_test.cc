// Packed micro-batches (data.packing: rows back to back, no padding) follow the padded run's
// trajectory: with dropout on (hidden, attention, classifier 0.1; LoRA dropout in the second
// test), fp32 on the CPU, the per-step losses agree within 1e-6 relative and the final weights
// within 1e-5 of each tensor's largest value, whether a step is one packed micro-batch or several
// (cut by rows or by a token budget); summary.json reports the padding each run computed.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "models/hf_checkpoint.h"
#include "train/batch_plan.h"
#include "train/memory_planner.h"
#include "run_cli.h"
#include "run_files.h"
#include "trajectory_compare.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

class Packing : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    // 120 rows of 5 to 14 tokens: 8 steps of 16 per epoch, the last one of 8 rows.
    write_pair_task(tmp_.path() + "/train.jsonl", 120, 3);
  }
  std::string run_dir(const std::string& run) { return tmp_.path() + "/" + run; }
  nlohmann::json train(const std::string& run, const std::string& packing,
                       const std::string& extra = "", const std::string& env = "") {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  max_length: 24\n  packing: " << packing
                        << "\ntraining:\n  epochs: 2\n  effective_batch_size: 16\n"
                        << "  learning_rate: 3.0e-3\n  log_every: 1\n  threads: 2\n"
                        << "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n"
                        << "  classifier_dropout: 0.1\n"
                        << extra << "output:\n  dir: " << run_dir(run) << "\n  progress: plain\n";
    const CliResult r = run_ftune("train --config " + path, env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(file_bytes(run_dir(run) + "/summary.json"));
  }

  // Per-step losses within 1e-6 relative, weights within 1e-5 of each tensor's largest value
  // (trajectory_compare.h).
  void expect_same_trajectory(const std::string& a, const std::string& b,
                              const std::string& weights_file = "/model/model.safetensors") {
    test::expect_same_trajectory(run_dir(a), run_dir(b), {16, 1e-6, 1e-5, weights_file});
  }

  TempDir tmp_;
  std::string model_;
};

TEST_F(Packing, PackedAndPaddedRunsFollowTheSameTrajectory) {
  const auto padded = train("padded", "off", "  batch_size: 16\n");
  const auto packed = train("packed", "on", "  batch_size: 16\n");
  // Several packed micro-batches per step: cut by rows (5 at most), and by a token budget.
  const auto rows5 = train("rows5", "on", "  batch_size: 16\n", "FTUNE_DEBUG_MICRO_BATCH_AT_STEP=0:5");
  // A memory budget that holds packed micro-batches of about 3 longest rows (24 tokens each).
  PlanTarget target{load_model_spec(model_).with_labels({"0", "1"}), {}, 24, 0, Device::cpu()};
  target.packed = true;
  target.max_rows = 16;
  const size_t budget = plan_memory(target, 72, GradientCheckpointing::Off).total;
  const auto tokens = train("tokens", "on",
                            "  plan_lengths: max_length\n  gradient_checkpointing: off\n"
                            "  memory_budget: " + std::to_string(budget) + "\n");
  expect_same_trajectory("padded", "packed");
  expect_same_trajectory("padded", "rows5");
  expect_same_trajectory("padded", "tokens");
  // What summary.json says about it: no padding computed when packed.
  EXPECT_EQ(packed["packing"]["on"], true);
  EXPECT_EQ(padded["packing"]["on"], false);
  EXPECT_GT(padded["padding_fraction"].get<double>(), 0.05);
  EXPECT_EQ(packed["padding_fraction"].get<double>(), 0.0);
  EXPECT_EQ(packed["padded_tokens_per_sample"], packed["real_tokens_per_sample"]);
  EXPECT_EQ(packed["train_real_tokens"], padded["train_real_tokens"]);
  EXPECT_EQ(packed["micro_batch_tokens"].get<int64_t>(), 16 * packed["memory"]["max_seq"].get<int64_t>());
  const int64_t budget_tokens = tokens["micro_batch_tokens"].get<int64_t>();
  EXPECT_GE(budget_tokens, 60);
  EXPECT_LT(budget_tokens, 120);
  // The losses move: dropout and the updates are really on.
  const auto l = step_losses(run_dir("packed"));
  EXPECT_NE(l.at(1), l.at(16));
}

TEST_F(Packing, LoraDropoutIsTheSameWhenPacked) {
  const std::string lora =
      "  batch_size: 8\npeft:\n  method: lora\n  r: 4\n  alpha: 8\n  dropout: 0.2\n"
      "  target_modules: [query, value, dense]\n";
  train("lora_padded", "off", lora);
  train("lora_packed", "on", lora);
  expect_same_trajectory("lora_padded", "lora_packed", "/adapter/adapter_model.safetensors");
}

// Packing runs on CUDA too: the plan of a GPU run budgets packed tokens (its micro-batch line).
TEST_F(Packing, OnPlansPackedMicroBatchesOnCuda) {
  const std::string path = tmp_.path() + "/gpu.yaml";
  std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                      << "/train.jsonl\n  packing: on\ntraining:\n  device: cuda\n"
                      << "output:\n  dir: " << run_dir("gpu") << "\n";
  const CliResult r = run_ftune("plan --config " + path + " --memory 8GiB");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("packed tokens"), std::string::npos) << r.output;
  // auto keeps the step's CUDA graphs (on by default on CUDA): padded, and the plan says why.
  std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                      << "/train.jsonl\n  packing: auto\ntraining:\n  device: cuda\n"
                      << "output:\n  dir: " << run_dir("gpu") << "\n";
  const CliResult a =
      run_ftune("plan --json --config " + path + " --memory 8GiB", "", Streams::kStdout);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto j = nlohmann::json::parse(a.output);
  EXPECT_FALSE(j["packing"]["on"].get<bool>()) << a.output;
  EXPECT_NE(j["packing"]["why"].get<std::string>().find("CUDA graphs"), std::string::npos);
}

// auto and on pack where the family can, on the CPU and on CUDA alike (packed micro-batches cost
// no more per token than padded ones on the CPU: bench/results/packing.md; the CUDA ops read
// cu_seqlens and the dropout place on the device), except that auto keeps a CUDA run's graphs
// (packed micro-batches cannot be captured); off never packs; on is an error where the family has
// no packed path, auto then pads.
TEST(PackingChoice, AutoAndOnPackWhereTheFamilyCan) {
  ModelInfo info;
  info.architecture = "BertForSequenceClassification";
  info.packing = true;
  const Device cpu = Device::cpu(), gpu = Device::cuda();
  EXPECT_TRUE(resolve_packing("auto", info, cpu, false).on);
  EXPECT_TRUE(resolve_packing("on", info, cpu, false).on);
  EXPECT_FALSE(resolve_packing("off", info, cpu, false).on);
  EXPECT_TRUE(resolve_packing("auto", info, gpu, false).on);  // training.cuda_graphs off
  const ResolvedPacking graphs = resolve_packing("auto", info, gpu, true);
  EXPECT_FALSE(graphs.on);
  EXPECT_NE(graphs.why.find("CUDA graphs"), std::string::npos) << graphs.why;
  EXPECT_TRUE(resolve_packing("on", info, gpu, true).on);
  EXPECT_FALSE(resolve_packing("off", info, gpu, false).on);
  info.packing = false;
  for (const Device d : {cpu, gpu}) {
    EXPECT_FALSE(resolve_packing("auto", info, d, false).on);
    EXPECT_THROW(resolve_packing("on", info, d, false), InputError);
  }
}

}  // namespace
}  // namespace ftune::test
