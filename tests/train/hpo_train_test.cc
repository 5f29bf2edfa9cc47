// `ftune hpo run` with the in-process training objective: each trial trains the tiny model with
// the sampled learning rate (and the search's fixed values) in its own run directory; the trial's
// value is the best validation metric, intermediate evaluations are reported, and with k folds
// every fold trains on its own stratified split and the value is their mean.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class HpoTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_bert(tmp_.path() + "/tiny");
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 1);
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 2);
    std::ofstream(tmp_.path() + "/train.yaml")
        << "model: {path: " << tmp_.path() << "/tiny}\n"
        << "data: {train: " << tmp_.path() << "/train.jsonl, max_length: 24}\n"
        << "training: {epochs: 2, batch_size: 16, learning_rate: 1.0e-3, threads: 2}\n"
        << "output: {dir: " << tmp_.path() << "/trials, progress: plain}\n";
  }
  std::string search(const std::string& extra) {
    const std::string path = tmp_.path() + "/search.yaml";
    std::ofstream(path) << "study: {name: lr, direction: maximize, metric: eval.accuracy}\n"
                        << "storage: sqlite:///" << tmp_.path() << "/study.db\n"
                        << "sampler: {type: random}\n"
                        << "space:\n"
                        << "  training.learning_rate: {type: float, low: 1.0e-4, high: 3.0e-3, "
                           "log: true}\n"
                        << "objective: {train_config: train.yaml}\n"
                        << extra;
    return path;
  }
  // The study's trials as `ftune hpo export --format json` writes them.
  nlohmann::json exported_trials(const std::string& cfg) {
    const CliResult e = run_ftune("hpo export --config " + cfg + " --format json --output " +
                                  tmp_.path() + "/trials.json");
    EXPECT_EQ(e.exit_code, 0) << e.output;
    const auto trials = nlohmann::json::parse(std::ifstream(tmp_.path() + "/trials.json"));
    return trials.is_array() ? trials : trials.at("trials");
  }
  TempDir tmp_;
};

TEST_F(HpoTrain, TrialsTrainInProcessWithKFolds) {
  const std::string cfg = search("fixed: {training.seed: 7}\nfolds: 2\n");
  const CliResult r = run_ftune("hpo run --config " + cfg + " --trials 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json list = exported_trials(cfg);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  for (const auto& t : list) {
    EXPECT_EQ(t["state"], "COMPLETE") << t.dump();
    const int n = t["number"].get<int>();
    double sum = 0;
    for (int fold = 0; fold < 2; ++fold) {
      const std::string run =
          tmp_.path() + "/trials/trial-" + std::to_string(n) + "/fold-" + std::to_string(fold);
      const auto s = nlohmann::json::parse(std::ifstream(run + "/summary.json"));
      EXPECT_EQ(s["best_eval"]["rows"], 48);  // half of the 96 rows validate in each of 2 folds
      sum += s["best_eval"]["accuracy"].get<double>();
      std::ifstream config(run + "/config.yaml");
      const std::string text((std::istreambuf_iterator<char>(config)),
                             std::istreambuf_iterator<char>());
      EXPECT_NE(text.find("seed: 7"), std::string::npos) << text;
    }
    EXPECT_NEAR(t["value"].get<double>(), sum / 2, 1e-12) << t.dump();
  }
}

// Without folds every validation evaluation is an intermediate value: a trial whose learning rate
// is far too small falls below the median of the finished one at its first evaluation and is
// pruned (its run stops there).
TEST_F(HpoTrain, BadTrialsArePrunedAtAnEvaluation) {
  std::string cfg = search(
      "fixed: {data.validation_split: 0.25, training.epochs: 4}\n"
      "pruner: {type: median, n_startup_trials: 1, n_warmup_steps: 0}\n");
  // A grid over two learning rates, the good one first.
  std::string text;
  {
    std::ifstream in(cfg);
    text.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  text.replace(text.find("sampler: {type: random}"), 23, "sampler: {type: grid}");
  text.replace(text.find("{type: float, low: 1.0e-4, high: 3.0e-3, log: true}"), 51,
               "{type: categorical, choices: [\"3.0e-3\", \"1.0e-9\"]}");
  std::ofstream(cfg) << text;
  const CliResult r = run_ftune("hpo run --config " + cfg + " --trials 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json list = exported_trials(cfg);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  EXPECT_EQ(list[0]["state"], "COMPLETE") << list[0].dump();
  EXPECT_EQ(list[1]["state"], "PRUNED") << list[1].dump();
  const auto s = nlohmann::json::parse(std::ifstream(tmp_.path() + "/trials/trial-1/summary.json"));
  EXPECT_EQ(s["status"], "hook");
  EXPECT_LT(s["steps"].get<int>(), s["total_steps"].get<int>());
}

}  // namespace
}  // namespace ftune::test
