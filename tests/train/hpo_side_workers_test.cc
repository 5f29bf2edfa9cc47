// `trials_per_device: 2`: one `ftune hpo run` starts two workers that train trials side by side,
// each pinned to its share of the cores with as many threads (hpo/worker_group.h). The trials run
// at the same time, and each trial's result equals a run of its parameters alone with the same
// threads.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpo/worker_group.h"
#include "hpo_export.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

TEST(HpoSideWorkers, TwoWorkersTrainTrialsSideBySideWithTheirOwnCores) {
  TempDir tmp;
  write_tiny_bert(tmp.path() + "/tiny");
  write_pair_task(tmp.path() + "/train.jsonl", 96, 1);
  write_pair_task(tmp.path() + "/val.jsonl", 32, 2);
  const std::string train = tmp.path() + "/train.yaml";
  std::ofstream(train) << "model: {path: " << tmp.path() << "/tiny}\n"
                       << "data: {train: " << tmp.path() << "/train.jsonl, validation: "
                       << tmp.path() << "/val.jsonl, max_length: 24}\n"
                       << "training: {epochs: 2, batch_size: 16, seed: 5}\n"
                       << "output: {dir: " << tmp.path() << "/trials, progress: plain}\n";
  const std::string search = tmp.path() + "/search.yaml";
  std::ofstream(search) << "study: {name: side, direction: maximize, metric: eval.accuracy}\n"
                        << "storage: sqlite:///" << tmp.path() << "/study.db\n"
                        << "sampler: {type: random}\n"
                        << "space:\n"
                        << "  training.learning_rate: {type: float, low: 1.0e-4, high: 3.0e-3, "
                           "log: true}\n"
                        << "objective: {train_config: train.yaml}\n"
                        << "trials_per_device: 2\n";
  const CliResult r = run_ftune("hpo run --config " + search + " --trials 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 workers side by side on core subsets"), std::string::npos) << r.output;
  const nlohmann::json list = exported_trials(search, tmp.path());
  ASSERT_GE(list.size(), 4u) << list.dump();

  // Each worker's share of the cores this test may use: its trials train with that many threads.
  const size_t cores = hpo::allowed_cpus().size();
  const int64_t threads = static_cast<int64_t>(cores >= 2 ? cores / 2 : 1);
  bool overlap = false;
  for (const auto& a : list) {
    EXPECT_EQ(a["state"], "COMPLETE") << a.dump();
    const auto s = nlohmann::json::parse(std::ifstream(
        tmp.path() + "/trials/trial-" + std::to_string(a["number"].get<int>()) + "/summary.json"));
    EXPECT_EQ(s["threads"], threads) << s.dump();
    for (const auto& b : list)
      if (a["number"] != b["number"] && a["start_time"] < b["end_time"] &&
          b["start_time"] < a["end_time"])
        overlap = true;
  }
  EXPECT_TRUE(overlap) << "no two trials ran at the same time: " << list.dump();

  // A trial's result is that of its parameters trained alone with the same threads.
  const nlohmann::json& t = list[0];
  const std::string lr = t["params_external"]["training.learning_rate"].dump();
  const CliResult alone = run_ftune(fmt::format(
      "train --config {} training.learning_rate={} training.threads={} output.dir={}/alone", train,
      lr, threads, tmp.path()));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  const auto s_alone = nlohmann::json::parse(std::ifstream(tmp.path() + "/alone/summary.json"));
  EXPECT_EQ(s_alone["best_eval"]["accuracy"], t["value"]) << s_alone.dump();
  const auto s_trial = nlohmann::json::parse(std::ifstream(
      tmp.path() + "/trials/trial-" + std::to_string(t["number"].get<int>()) + "/summary.json"));
  EXPECT_EQ(s_alone["best_eval"]["loss"], s_trial["best_eval"]["loss"]);
}

}  // namespace
}  // namespace ftune::test
