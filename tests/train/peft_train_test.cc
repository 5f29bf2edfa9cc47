// `ftune train` with LoRA / DoRA adapters and gradient checkpointing through the CLI: only the
// adapters and the head train, the run leaves a PEFT adapter (adapter/) and the merged model
// (model/) that `ftune eval` scores exactly as training evaluated it, a killed DoRA run with
// adapter dropout, checkpointing and the pooler adapted (all-linear) resumes bit-exactly, and a
// bad `peft:` key or a target PEFT would refuse names itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class PeftTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_bert(tmp_.path() + "/tiny");
    write_pair_task(tmp_.path() + "/train.jsonl", 128, 1);
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 2);
  }
  std::string config(const std::string& run, const std::string& peft) {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model: {path: " << tmp_.path() << "/tiny}\n"
                        << "data: {train: " << tmp_.path()
                        << "/train.jsonl, validation: " << tmp_.path()
                        << "/val.jsonl, max_length: 24}\n"
                        << "training: {epochs: 3, batch_size: 16, learning_rate: 1.0e-2, "
                           "log_every: 1, threads: 2}\n"
                        << "eval: {every_steps: 4}\n"
                        << peft << "output: {dir: " << tmp_.path() << "/" << run
                        << ", progress: plain}\n";
    return path;
  }
  std::string run_dir(const std::string& run) { return tmp_.path() + "/" + run; }
  TempDir tmp_;
};

TEST_F(PeftTrain, LoraTrainsAdaptersAndExportsAMergedModel) {
  const CliResult r = run_ftune(
      "train --config " +
      config("lora", "peft: {method: lora, r: 4, alpha: 8, target_modules: [query, value]}\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = nlohmann::json::parse(file_bytes(run_dir("lora") + "/summary.json"));
  EXPECT_EQ(s["peft"], "lora");
  // 2 layers x 2 modules x (4 x 32 + 32 x 4) adapter weights + the head (pooler frozen).
  EXPECT_EQ(s["trainable_parameters"], 2 * 2 * (4 * 32 + 32 * 4) + 32 * 2 + 2);
  std::vector<double> losses;
  std::ifstream metrics(run_dir("lora") + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") losses.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(losses.size(), 20u);
  // Single-step losses stay near ln 2 +- 0.02 here (the B matrices start at zero and the logits
  // separate slowly), so one step against another is a coin toss: compare the first and last
  // eight steps, and the ranking the adapters learned (chance is 0.5).
  auto mean = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / 8; };
  EXPECT_LT(mean(losses.end() - 8, losses.end()), mean(losses.begin(), losses.begin() + 8));
  EXPECT_GT(s["best_eval"]["roc_auc"].get<double>(), 0.9);
  EXPECT_TRUE(fs::exists(run_dir("lora") + "/adapter/adapter_config.json"));
  EXPECT_TRUE(fs::exists(run_dir("lora") + "/adapter/adapter_model.safetensors"));
  // The merged model scores the validation file as training's evaluation of the best adapter.
  const CliResult e = run_ftune("eval --model " + run_dir("lora") + "/model --data " + tmp_.path() +
                                "/val.jsonl --output " + tmp_.path() + "/e.json");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto m = nlohmann::json::parse(file_bytes(tmp_.path() + "/e.json"));
  EXPECT_EQ(m["confusion"], s["best_eval"]["confusion"]);
  EXPECT_NEAR(m["loss"].get<double>(), s["best_eval"]["loss"].get<double>(), 1e-4);
}

// DoRA with adapter dropout on all-linear, which (as in PEFT) includes bert.pooler.dense.
TEST_F(PeftTrain, DoraWithDropoutAndCheckpointingResumesBitExactly) {
  const std::string peft =
      "peft: {method: dora, r: 4, alpha: 4, dropout: 0.1, target_modules: all-linear}\n";
  const std::string extra = " training.gradient_checkpointing=on";
  ASSERT_EQ(run_ftune("train --config " + config("full", peft) + extra).exit_code, 0);
  const CliResult killed = run_ftune("train --config " + config("killed", peft) + extra,
                                     "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=15");
  ASSERT_EQ(killed.exit_code, 137) << killed.output;
  const CliResult resumed =
      run_ftune("train --config " + config("killed", peft) + extra + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos);
  EXPECT_EQ(logged_train_losses(run_dir("full")), logged_train_losses(run_dir("killed")));
  EXPECT_TRUE(file_bytes(run_dir("full") + "/adapter/adapter_model.safetensors") ==
              file_bytes(run_dir("killed") + "/adapter/adapter_model.safetensors"));
  const auto s = nlohmann::json::parse(file_bytes(run_dir("full") + "/summary.json"));
  EXPECT_EQ(s["gradient_checkpointing"], true);
  const auto adapter =
      nlohmann::json::parse(file_bytes(run_dir("full") + "/adapter/adapter_config.json"));
  EXPECT_EQ(adapter["target_modules"].size(), 2u * 6 + 1);
  EXPECT_EQ(adapter["target_modules"].back(), "bert.pooler.dense");
  EXPECT_EQ(adapter["lora_dropout"], 0.1);
  const CliResult p = run_ftune("predict --model " + run_dir("full") + "/model --data " +
                                tmp_.path() + "/val.jsonl --output " + tmp_.path() + "/p.jsonl");
  EXPECT_EQ(p.exit_code, 0) << p.output;
}

TEST_F(PeftTrain, BadPeftKeysNameThemselves) {
  const CliResult r =
      run_ftune("train --config " + config("bad", "peft: {method: lora, rank: 4}\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("rank"), std::string::npos) << r.output;
  const CliResult r2 =
      run_ftune("train --config " + config("bad2", "peft: {method: lora, r: 0}\n"));
  EXPECT_EQ(r2.exit_code, 2);
  EXPECT_NE(r2.output.find("r"), std::string::npos) << r2.output;
  const CliResult r3 = run_ftune("train --config " + config("bad3", "") +
                                 " training.gradient_checkpointing=sometimes");
  EXPECT_EQ(r3.exit_code, 2);
  EXPECT_NE(r3.output.find("gradient_checkpointing"), std::string::npos) << r3.output;
  // Targets PEFT refuses (a container module) or that ftune cannot adapt (an embedding).
  for (const auto& [targets, message] :
       {std::pair{"[intermediate]", "matches 'bert.encoder.layer.0.intermediate', which is not a "
                                    "linear layer; PEFT refuses it too"},
        std::pair{"[query, word_embeddings]",
                  "matches bert.embeddings.word_embeddings, an embedding"}}) {
    const CliResult r4 = run_ftune(
        "train --config " +
        config("bad4", std::string("peft: {method: lora, target_modules: ") + targets + "}\n"));
    EXPECT_EQ(r4.exit_code, 2);
    EXPECT_NE(r4.output.find(message), std::string::npos) << r4.output;
  }
}

}  // namespace
}  // namespace ftune::test
