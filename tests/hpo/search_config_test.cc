// The search configuration: every key typed, unknown keys and bad values named with file:line.
#include <gtest/gtest.h>

#include "core/error.h"
#include "hpo/search_config.h"

namespace ftune::hpo {
namespace {

const char* kMinimal = R"(study: {name: s, direction: maximize, metric: eval.accuracy}
storage: sqlite:///s.db
space: {lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}}
objective: {command: "python train.py"}
)";

std::string error_of(const std::string& yaml) {
  try {
    parse_search_config(YAML::Load(yaml), "search.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SearchConfig, ParsesEveryKey) {
  const std::string yaml = std::string(kMinimal) +
                           "sampler: {type: tpe}\n"
                           "pruner: {type: median}\n"
                           "fixed: {epochs: 3, model: bert}\n"
                           "folds: 5\nretries: 2\nretry_failed: true\nheartbeat_s: 2\n"
                           "grace_s: 7.5\nseed: 9\ntrials: 100\ntimeout_s: 3600\n";
  const SearchConfig c = parse_search_config(YAML::Load(yaml), "dir/search.yaml");
  EXPECT_EQ(c.study_name, "s");
  EXPECT_EQ(c.direction, Direction::Maximize);
  EXPECT_EQ(c.metric, "eval.accuracy");
  EXPECT_EQ(c.storage, "sqlite:///s.db");
  EXPECT_EQ(c.command, "python train.py");
  EXPECT_TRUE(c.pass_args);
  EXPECT_EQ(c.fixed.at("epochs"), "3");
  EXPECT_EQ(c.fixed.at("model"), "bert");
  EXPECT_EQ(c.folds, 5);
  EXPECT_EQ(c.retries, 2);
  EXPECT_TRUE(c.retry_failed);
  EXPECT_EQ(c.heartbeat_s, 2);
  EXPECT_EQ(c.grace_s, 7.5);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.trials, 100);
  EXPECT_EQ(c.timeout_s, 3600);
  EXPECT_EQ(c.sampler["type"].as<std::string>(), "tpe");
  EXPECT_TRUE(c.space["lr"]);

  const SearchConfig t = parse_search_config(
      YAML::Load("study: {name: s}\nspace: {}\nobjective: {train_config: train.yaml}\n"),
      "dir/search.yaml");
  EXPECT_EQ(t.train_config, "dir/train.yaml");
  EXPECT_EQ(t.direction, Direction::Minimize);
  EXPECT_EQ(t.trial_ranks, 1);
  EXPECT_EQ(t.trial_launcher, "mpirun -np {ranks}");

  const SearchConfig dp = parse_search_config(
      YAML::Load("study: {name: s}\nspace: {}\nobjective: {train_config: train.yaml}\n"
                 "trial_ranks: 4\ntrial_launcher: 'srun --ntasks={ranks} --gpus-per-task=1'\n"),
      "dir/search.yaml");
  EXPECT_EQ(dp.trial_ranks, 4);
  EXPECT_EQ(dp.trial_launcher, "srun --ntasks={ranks} --gpus-per-task=1");
}

TEST(SearchConfig, TrialRanksNeedATrainObjectiveAndALauncherWithTheCount) {
  const std::string train = "study: {name: s}\nspace: {}\nobjective: {train_config: t.yaml}\n";
  EXPECT_NE(error_of(train + "trial_ranks: 0\n").find("'trial_ranks' must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of(train + "trial_launcher: mpirun -np 4\n")
                .find("search.yaml:4: key 'trial_launcher' must contain {ranks}"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "trial_ranks: 2\n")
                .find("'trial_ranks' applies to a train_config objective"),
            std::string::npos);
}

TEST(SearchConfig, FoldReportsAreEvaluationsOrFoldsOfATrainObjective) {
  const std::string train = "study: {name: s}\nspace: {}\nobjective: {train_config: t.yaml}\n";
  EXPECT_EQ(parse_search_config(YAML::Load(train), "search.yaml").fold_reports,
            FoldReports::Evaluations);
  EXPECT_EQ(parse_search_config(YAML::Load(train + "fold_reports: folds\n"), "search.yaml")
                .fold_reports,
            FoldReports::Folds);
  EXPECT_NE(error_of(train + "fold_reports: epochs\n")
                .find("search.yaml:4: key 'fold_reports' must be evaluations or folds, got 'epochs'"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "fold_reports: folds\n")
                .find("'fold_reports' applies to a train_config objective"),
            std::string::npos);
}

TEST(SearchConfig, TrialsPerDeviceIsAPositiveCountThatExcludesTrialRanks) {
  const std::string train = "study: {name: s}\nspace: {}\nobjective: {train_config: t.yaml}\n";
  EXPECT_EQ(parse_search_config(YAML::Load(train), "search.yaml").trials_per_device, 1);
  EXPECT_EQ(parse_search_config(YAML::Load(train + "trials_per_device: 4\n"), "search.yaml")
                .trials_per_device,
            4);
  EXPECT_NE(error_of(train + "trials_per_device: 0\n").find("'trials_per_device' must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of(train + "trials_per_device: 2\ntrial_ranks: 2\n")
                .find("keys 'trials_per_device' (2) and 'trial_ranks' (2) exclude each other"),
            std::string::npos);
}

TEST(SearchConfig, ErrorsNameTheKeyAndLine) {
  EXPECT_NE(
      error_of(std::string(kMinimal) + "trails: 5\n").find("search.yaml:5: unknown key 'trails'"),
      std::string::npos);
  EXPECT_NE(error_of("study: {name: s, dirction: minimize}\nspace: {}\nobjective: {command: x}\n")
                .find("unknown key 'study.dirction'"),
            std::string::npos);
  EXPECT_NE(error_of("study: {name: s, direction: up}\nspace: {}\nobjective: {command: x}\n")
                .find("direction must be 'minimize' or 'maximize', got 'up'"),
            std::string::npos);
  EXPECT_NE(error_of("study: {name: s}\nspace: {}\n").find("missing key 'objective'"),
            std::string::npos);
  EXPECT_NE(error_of("study: {name: s}\nspace: {}\nobjective: {command: x, train_config: y}\n")
                .find("exactly one of 'command' or 'train_config'"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "folds: many\n")
                .find("key 'folds' must be an integer, got 'many'"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "folds: 0\n").find("'folds' must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "heartbeat_s: 10\ngrace_s: 5\n")
                .find("grace_s (5) must be larger than heartbeat_s (10)"),
            std::string::npos);
  EXPECT_NE(error_of("study: {name: s}\nobjective: {command: x}\n").find("missing key 'space'"),
            std::string::npos);
  EXPECT_NE(error_of("- a\n- b\n").find("must be a mapping"), std::string::npos);
}

TEST(SearchConfig, TrainConfigMetricSetsOrChecksTheDirection) {
  // A minimised metric (mse, mae, loss) without a direction is minimised, a maximised one
  // maximised; a direction against the metric is refused naming study.direction.
  const auto parse = [](const std::string& study) {
    return parse_search_config(
        YAML::Load("study: " + study + "\nspace: {}\nobjective: {train_config: t.yaml}\n"),
        "search.yaml");
  };
  EXPECT_EQ(parse("{name: s, metric: eval.mse}").direction, Direction::Minimize);
  EXPECT_EQ(parse("{name: s, metric: eval.spearman}").direction, Direction::Maximize);
  EXPECT_EQ(parse("{name: s, metric: mae, direction: minimize}").direction, Direction::Minimize);
  const std::string e = error_of(
      "study: {name: s, metric: eval.mse, direction: maximize}\nspace: {}\n"
      "objective: {train_config: t.yaml}\n");
  EXPECT_NE(e.find("study.direction is maximize but study.metric eval.mse is lower the better"),
            std::string::npos)
      << e;
  // A command objective's metric is the command's own: any direction.
  EXPECT_EQ(parse_search_config(YAML::Load("study: {name: s, metric: mse, direction: maximize}\n"
                                           "space: {}\nobjective: {command: x}\n"),
                                "search.yaml")
                .direction,
            Direction::Maximize);
}

}  // namespace
}  // namespace ftune::hpo
