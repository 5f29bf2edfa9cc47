// `ftune hpo run` with the in-process training objective: each trial trains the tiny model with
// the sampled learning rate (and the search's fixed values) in its own run directory; the trial's
// value is the best validation metric, intermediate evaluations are reported, and with k folds
// every fold trains on its own stratified split and the value is their mean. A training config no
// trial can run is refused before the first trial; a trial past trial_timeout_s stops at a step;
// a trial whose worker is killed with -9 in the middle of fold 2 is continued by its retry (folds
// 0 and 1 reused, fold 2 resumed from its checkpoint) with the result of an uninterrupted trial.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>
#include <algorithm>

#include "hpo/storage.h"
#include "hpo_export.h"
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
  nlohmann::json exported_trials(const std::string& cfg) {
    return test::exported_trials(cfg, tmp_.path());
  }
  // The search file with `extra`, as a grid over two learning rates, the good one first.
  std::string grid_search(const std::string& extra) {
    const std::string cfg = search(extra);
    std::string text;
    {
      std::ifstream in(cfg);
      text.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    text.replace(text.find("sampler: {type: random}"), 23, "sampler: {type: grid}");
    text.replace(text.find("{type: float, low: 1.0e-4, high: 3.0e-3, log: true}"), 51,
                 "{type: categorical, choices: [\"3.0e-3\", \"1.0e-9\"]}");
    std::ofstream(cfg) << text;
    return cfg;
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
  const std::string cfg = grid_search(
      "fixed: {data.validation_split: 0.25, training.epochs: 4}\n"
      "pruner: {type: median, n_startup_trials: 1, n_warmup_steps: 0}\n");
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

// With k folds, every evaluation of every fold reaches the pruner (fold_reports: evaluations, the
// default) at its budget: epochs trained in the trial so far x 100. A trial whose learning rate is
// far too small is pruned at its first evaluation of fold 0 instead of after the whole fold, as
// it is with `fold_reports: folds` (an Optuna user's report after each fold).
class HpoFoldReports : public HpoTrain {
 protected:
  nlohmann::json run_grid(const std::string& fold_reports) {
    const std::string cfg =
        grid_search("fixed: {training.epochs: 4, training.seed: 3}\nfolds: 2\n" + fold_reports +
                    "pruner: {type: median, n_startup_trials: 1, n_warmup_steps: 0}\n");
    const CliResult r = run_ftune("hpo run --config " + cfg + " --trials 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return exported_trials(cfg);
  }
};

TEST_F(HpoFoldReports, EveryEvaluationOfEveryFoldIsReportedAtItsBudget) {
  const nlohmann::json list = run_grid("");
  ASSERT_EQ(list.size(), 2u) << list.dump();
  const nlohmann::json& good = list[0];
  ASSERT_EQ(good["state"], "COMPLETE") << good.dump();
  // 48 training rows a fold, batch 16: 3 steps an epoch, an evaluation at each epoch's end.
  std::vector<std::string> steps;
  for (const auto& [k, v] : good["intermediate"].items()) steps.push_back(k);
  std::sort(steps.begin(), steps.end(), [](const std::string& a, const std::string& b) {
    return std::stoi(a) < std::stoi(b);
  });
  EXPECT_EQ(steps, (std::vector<std::string>{"100", "200", "300", "400", "500", "600", "700",
                                             "800"}));
  // At the end of each fold the running mean of the folds' best values.
  const double f0 = good["fold_values"]["0"].get<double>(), f1 = good["fold_values"]["1"].get<double>();
  EXPECT_DOUBLE_EQ(good["intermediate"]["400"].get<double>(), f0);
  EXPECT_DOUBLE_EQ(good["intermediate"]["800"].get<double>(), (f0 + f1) / 2);
  EXPECT_NEAR(good["value"].get<double>(), (f0 + f1) / 2, 1e-12);
  // Within fold 1: fold 0's value and the evaluation's, averaged.
  std::ifstream metrics(tmp_.path() + "/trials/trial-0/fold-1/metrics.jsonl");
  std::optional<double> first;
  for (std::string line; !first && std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == "validation") first = j["accuracy"].get<double>();
  }
  ASSERT_TRUE(first.has_value());
  EXPECT_DOUBLE_EQ(good["intermediate"]["500"].get<double>(), (f0 + *first) / 2);
  const nlohmann::json& bad = list[1];
  EXPECT_EQ(bad["state"], "PRUNED") << bad.dump();
  EXPECT_EQ(bad["intermediate"].size(), 1u) << bad.dump();  // pruned at its first evaluation
  EXPECT_TRUE(bad["intermediate"].contains("100")) << bad.dump();
  EXPECT_FALSE(fs::exists(tmp_.path() + "/trials/trial-1/fold-1"));
  const auto s =
      nlohmann::json::parse(std::ifstream(tmp_.path() + "/trials/trial-1/fold-0/summary.json"));
  EXPECT_EQ(s["status"], "hook");
  EXPECT_EQ(s["steps"], 3);
  // The rows each trial trained (study_cost.h): 2 folds x 4 epochs x 48 rows, and 3 steps of 16.
  EXPECT_EQ(good["attrs"]["train_samples"], 384) << good.dump();
  EXPECT_EQ(bad["attrs"]["train_samples"], 48) << bad.dump();
}

TEST_F(HpoFoldReports, FoldsReportOnlyTheirEnds) {
  const nlohmann::json list = run_grid("fold_reports: folds\n");
  ASSERT_EQ(list.size(), 2u) << list.dump();
  EXPECT_EQ(list[0]["state"], "COMPLETE") << list[0].dump();
  EXPECT_EQ(list[0]["intermediate"].size(), 2u) << list[0].dump();  // steps 0 and 1: the folds
  EXPECT_EQ(list[1]["state"], "PRUNED") << list[1].dump();
  // The bad trial trained all of fold 0 before the pruner saw it.
  const auto s =
      nlohmann::json::parse(std::ifstream(tmp_.path() + "/trials/trial-1/fold-0/summary.json"));
  EXPECT_EQ(s["steps"], s["total_steps"]);
  EXPECT_FALSE(fs::exists(tmp_.path() + "/trials/trial-1/fold-1"));
}

// The reproduction: a training config that conflicts with `folds` (it sets its own
// validation split) made one worker fail thousands of trials in seconds and exit 0. It is refused
// before any trial, naming the key, and nothing is written (not even the study file); so is a
// value of the space the config refuses.
TEST_F(HpoTrain, ConfigNoTrialCanRunIsRefusedBeforeTheFirstTrial) {
  std::string cfg = search("fixed: {data.validation_split: 0.25}\nfolds: 2\n");
  CliResult r = run_ftune("hpo run --config " + cfg + " --trials 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("objective.train_config cannot run any trial"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("key 'data.folds' takes the validation set from the training file"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("each trial sets data.folds=2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/study.db"));

  cfg = search("");
  std::string text;
  {
    std::ifstream in(cfg);
    text.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  text.replace(text.find("objective:"), 0,
               "  training.warmup_ratio: {type: float, low: 0, high: 1.5}\n");
  std::ofstream(cfg) << text;
  r = run_ftune("hpo run --config " + cfg + " --trials 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("with training.warmup_ratio=1.5 (a value of the search space; the "
                          "other parameters at training.learning_rate=0.0001): "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("study override 'training.warmup_ratio=1.5': key "
                          "'training.warmup_ratio' must be in [0, 1)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("command-line override"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/study.db"));
}

// trial_timeout_s stops an in-process trial at its next optimizer step (checkpoint saved, as on
// SIGTERM); the trial fails with the reason.
TEST_F(HpoTrain, TrialTimeoutStopsTrainingAtAStep) {
  const std::string cfg = search(
      "fixed: {training.epochs: 1000, data.validation_split: 0.25}\ntrial_timeout_s: 1\n"
      "heartbeat_s: 0.2\n");
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_ftune("hpo run --config " + cfg + " --trials 1");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const nlohmann::json list = exported_trials(cfg);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["state"], "FAIL");
  EXPECT_NE(list[0]["error"].get<std::string>().find("trial_timeout_s"), std::string::npos)
      << list[0].dump();
  const auto s = nlohmann::json::parse(std::ifstream(tmp_.path() + "/trials/trial-0/summary.json"));
  EXPECT_EQ(s["status"], "interrupted");
  EXPECT_LT(s["steps"].get<int>(), s["total_steps"].get<int>());
  EXPECT_TRUE(fs::exists(tmp_.path() + "/trials/trial-0/checkpoints/index.json"));
}

// The seed scenario: long k-fold trials whose worker dies. A worker is killed with -9 in the
// middle of fold 2 (after a checkpoint of it, before its end); another worker fails the trial
// after the grace period and its retry continues it: folds 0 and 1 keep their values, fold 2
// resumes from its checkpoint. Fold values, the trial's value and fold 2's weights equal those
// of an uninterrupted trial with the same params, and the study says the retry resumed.
// A trial keeps no weights unless the search asks (keep_trial_models): its folds write their
// metrics and summary, no checkpoint and no model/, and their values are those of a trial that
// keeps them.
TEST_F(HpoTrain, TrialsKeepNoWeightsUnlessAsked) {
  auto study = [&](const std::string& name, const std::string& extra) {
    const std::string path = tmp_.path() + "/" + name + ".yaml";
    std::ofstream(path) << "study: {name: " << name
                        << ", direction: maximize, metric: eval.accuracy}\n"
                        << "storage: sqlite:///" << tmp_.path() << "/study.db\n"
                        << "sampler: {type: grid}\n"
                        << "space:\n  training.learning_rate: {type: categorical, choices: "
                           "[\"2.0e-3\"]}\n"
                        << "fixed: {training.seed: 3, output.dir: " << tmp_.path() << "/" << name
                        << "}\n"
                        << "objective: {train_config: train.yaml}\nfolds: 2\n"
                        << extra;
    const CliResult r = run_ftune("hpo run --config " + path + " --trials 1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return hpo::open_storage(tmp_.path() + "/study.db")->trials(
        hpo::open_storage(tmp_.path() + "/study.db")->find_study(name)->id);
  };
  const auto light = study("light", "");
  const auto kept = study("kept", "keep_trial_models: true\n");
  ASSERT_EQ(light.size(), 1u);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(light[0].state, hpo::TrialState::Complete) << light[0].error;
  EXPECT_EQ(light[0].fold_values, kept[0].fold_values);
  EXPECT_EQ(light[0].value, kept[0].value);
  for (int fold = 0; fold < 2; ++fold) {
    const fs::path l = tmp_.path() + "/light/trial-0/fold-" + std::to_string(fold);
    const fs::path k = tmp_.path() + "/kept/trial-0/fold-" + std::to_string(fold);
    EXPECT_TRUE(fs::exists(l / "summary.json"));
    EXPECT_TRUE(fs::exists(l / "metrics.jsonl"));
    EXPECT_FALSE(fs::exists(l / "model")) << l;
    EXPECT_FALSE(fs::exists(l / "checkpoints")) << l;
    EXPECT_TRUE(fs::exists(k / "model" / "model.safetensors")) << k;
    const auto s = nlohmann::json::parse(std::ifstream(l / "summary.json"));
    EXPECT_FALSE(s.contains("model_dir")) << s.dump();
    EXPECT_EQ(s["model_step"], s["steps"]) << s.dump();
  }
}

TEST_F(HpoTrain, KilledTrialIsContinuedByItsRetryWithTheSameResult) {
  auto config = [&](const std::string& study, const std::string& out) {
    const std::string path = tmp_.path() + "/" + study + ".yaml";
    std::ofstream(path) << "study: {name: " << study
                        << ", direction: maximize, metric: eval.accuracy}\n"
                        << "storage: sqlite:///" << tmp_.path() << "/study.db\n"
                        << "sampler: {type: grid}\n"
                        << "space:\n"
                        << "  training.learning_rate: {type: categorical, choices: [\"2.0e-3\"]}\n"
                        << "fixed: {training.epochs: 4, training.seed: 3, output.dir: " << out
                        << "}\nkeep_trial_models: true\n"
                        << "objective: {train_config: train.yaml}\n"
                        << "folds: 3\nheartbeat_s: 0.2\ngrace_s: 1.5\n";
    return path;
  };
  const std::string out = tmp_.path() + "/killed", ref_out = tmp_.path() + "/ref";
  const std::string cfg = config("killed", out);
  const std::string start =
      fmt::format("cd {}; {} hpo run --config {} --trials 1 > a.log 2>&1 & echo $! > a.pid",
                  tmp_.path(), ftune_binary(), cfg);
  ASSERT_EQ(std::system(start.c_str()), 0);
  // 64 training rows per fold, batch 16: 4 steps an epoch, 16 in all, a checkpoint at each
  // epoch's end (keep_trial_models: the fold's weights are compared below). Stop the worker (SIGSTOP: at once) when fold 2 has its first checkpoint.
  const fs::path fold2 = out + "/trial-0/fold-2";
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(fold2 / "checkpoints" / "index.json")) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120))
        << file_bytes(tmp_.path() + "/a.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int worker = std::stoi(file_bytes(tmp_.path() + "/a.pid"));
  ASSERT_EQ(kill(worker, SIGSTOP), 0);
  ASSERT_FALSE(fs::exists(fold2 / "summary.json")) << "fold 2 ended before the kill";
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const auto fold0_written = fs::last_write_time(out + "/trial-0/fold-0/summary.json");

  // Worker B: the budget (1 trial) is spent, so it waits for the stale trial, fails it and runs
  // its retry.
  CliResult r = run_ftune("hpo run --config " + cfg + " --trials 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ftune("hpo run --config " + config("ref", ref_out) + " --trials 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto storage = hpo::open_storage(tmp_.path() + "/study.db");
  const auto killed = storage->trials(storage->find_study("killed")->id);
  const auto ref = storage->trials(storage->find_study("ref")->id);
  ASSERT_EQ(killed.size(), 2u);
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_EQ(killed[0].state, hpo::TrialState::Failed);
  EXPECT_EQ(killed[0].fold_values.size(), 2u);  // folds 0 and 1 were done
  const hpo::Trial& retry = killed[1];
  EXPECT_EQ(retry.retry_of, 0);
  ASSERT_EQ(retry.state, hpo::TrialState::Complete) << retry.error;
  EXPECT_EQ(retry.fold_values, ref[0].fold_values);
  EXPECT_EQ(retry.value, ref[0].value);
  ASSERT_TRUE(retry.attrs.contains("resumed")) << retry.attrs.dump();
  const nlohmann::json& resumed = retry.attrs["resumed"];
  EXPECT_EQ(resumed["from_trial"], 0);
  EXPECT_EQ(resumed["folds_reused"], nlohmann::json({0, 1}));
  EXPECT_EQ(resumed["fold"], 2);
  EXPECT_GE(resumed["step"].get<int>(), 4);
  EXPECT_LT(resumed["step"].get<int>(), 16);
  // Fold 2 continued in the retry's directory: the same weights as the uninterrupted run.
  const std::string weights = file_bytes(out + "/trial-1/fold-2/model/model.safetensors");
  ASSERT_FALSE(weights.empty());
  EXPECT_TRUE(weights == file_bytes(ref_out + "/trial-0/fold-2/model/model.safetensors"));
  // The finished folds were not trained again: their runs moved along, as they were.
  EXPECT_FALSE(fs::exists(out + "/trial-0"));
  EXPECT_TRUE(fs::last_write_time(out + "/trial-1/fold-0/summary.json") == fold0_written);
  const CliResult status = run_ftune("hpo status --config " + cfg);
  EXPECT_NE(status.output.find("(retry of 0) (resumed trial 0: folds 0, 1 reused, fold 2 from "
                               "step " +
                               resumed["step"].dump() + ")"),
            std::string::npos)
      << status.output;
}

}  // namespace
}  // namespace ftune::test
