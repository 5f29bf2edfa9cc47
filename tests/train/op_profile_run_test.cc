// FTUNE_PROFILE_OPS=1 on a real training step (CPU, host clock): `ftune train` writes
// op_profile.json and logs the table; the table lists the ops of the step (forward, backward,
// loss, optimizer, the GEMMs inside the linear layers) and its rows add up to most of the step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class OpProfileRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 256, 1);
  }
  CliResult train(const std::string& env) {
    const std::string path = tmp_.path() + "/config.yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  max_length: 64\ntraining:\n  max_steps: 4\n"
                        << "  batch_size: 16\n  effective_batch_size: 32\n  log_every: 2\n"
                        << "  threads: 1\noutput:\n  dir: " << run_ << "\n  overwrite: true\n";
    return run_ftune("train --config " + path, env);
  }
  TempDir tmp_;
  std::string model_, run_ = tmp_.path() + "/run";
};

TEST_F(OpProfileRun, ATrainingStepIsBrokenDownOpByOp) {
  const CliResult r = train("FTUNE_PROFILE_OPS=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("op time of step 3 on cpu (host clock)"), std::string::npos) << r.output;
  const std::string path = run_ + "/op_profile.json";
  ASSERT_TRUE(fs::exists(path)) << r.output;
  const auto p = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(p["step"], 3);
  std::map<std::string, int64_t> calls;
  double sum = 0;
  for (const auto& op : p["ops"]) {
    calls[op["name"].get<std::string>()] = op["calls"].get<int64_t>();
    sum += op["ms"].get<double>();
    EXPECT_GE(op["ms"].get<double>(), 0.0) << op.dump();
  }
  // Two micro-batches of 16 rows, 2 layers: per micro-batch one attention per layer forward and
  // backward, QKV + output + two FFN GEMMs per layer forward; one AdamW step for the whole step.
  EXPECT_EQ(calls["attention_forward"], 2 * 2) << p.dump(1);
  EXPECT_EQ(calls["attention_backward"], 2 * 2) << p.dump(1);
  EXPECT_GE(calls["linear_forward > gemm"], 2 * 2 * 4) << p.dump(1);
  EXPECT_GE(calls["linear_backward > gemm"], 2 * 2 * 4) << p.dump(1);
  for (const char* op : {"embedding_forward", "embedding_backward", "layer_norm_forward",
                         "layer_norm_backward", "gelu_forward", "gelu_backward",
                         "cross_entropy_forward", "cross_entropy_backward", "adamw_step"})
    EXPECT_GE(calls[op], 1) << op << "\n" << p.dump(1);
  const double step = p["step_ms"].get<double>();
  EXPECT_NEAR(p["ops_ms"].get<double>(), sum, 1e-6 * std::max(sum, 1.0));
  EXPECT_NEAR(p["gap_ms"].get<double>(), step - sum, 1e-6 * std::max(step, 1.0));
  // The ops are most of a CPU step: the rest is staging the inputs and host bookkeeping.
  EXPECT_LE(sum, step);
  EXPECT_GE(sum, 0.7 * step) << p.dump(1);
}

TEST_F(OpProfileRun, NoProfileUnlessAskedFor) {
  const CliResult r = train("");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(run_ + "/op_profile.json"));
  EXPECT_EQ(r.output.find("op time of step"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ftune::test
