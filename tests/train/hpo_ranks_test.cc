// `ftune hpo run` and data parallelism (issue 20): a trial may itself be a data-parallel run
// (trial_ranks: 2, its ranks started by the search's trial_launcher, mpirun here): its
// evaluations reach the pruner while it runs, a pruned trial's ranks stop together at a step
// (SIGTERM through mpirun, checkpoint saved), and a complete trial's value is its ranks' best
// evaluation. Workers that a launcher started side by side (`mpirun -np 2 ftune hpo run`) stay
// independent workers: their in-process trials do not join MPI as ranks of one run.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "hpo_export.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

constexpr const char* kRootMpi =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
    "OMPI_MCA_btl_vader_single_copy_mechanism=none";

class HpoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_bert(tmp_.path() + "/tiny");
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 1);
    std::ofstream(tmp_.path() + "/train.yaml")
        << "model: {path: " << tmp_.path() << "/tiny}\n"
        << "data: {train: " << tmp_.path() << "/train.jsonl, max_length: 24, "
        << "validation_split: 0.25}\n"
        << "training: {epochs: 4, batch_size: 8, gradient_accumulation: 2, "
        << "learning_rate: 1.0e-3, threads: 1}\n"
        << "output: {dir: " << tmp_.path() << "/trials, progress: plain}\n";
  }
  // A grid over two learning rates, the good one first; the median pruner stops the second at
  // its first evaluation.
  std::string search(const std::string& extra) {
    const std::string path = tmp_.path() + "/search.yaml";
    std::ofstream(path) << "study: {name: lr, direction: maximize, metric: eval.accuracy}\n"
                        << "storage: sqlite:///" << tmp_.path() << "/study.db\n"
                        << "sampler: {type: grid}\n"
                        << "pruner: {type: median, n_startup_trials: 1, n_warmup_steps: 0}\n"
                        << "space:\n"
                        << "  training.learning_rate: {type: categorical, choices: [\"3.0e-3\", "
                           "\"1.0e-9\"]}\n"
                        << "objective: {train_config: train.yaml}\n"
                        << extra;
    return path;
  }
  nlohmann::json exported_trials(const std::string& cfg) {
    return test::exported_trials(cfg, tmp_.path());
  }
  nlohmann::json summary(int trial) {
    const std::string path =
        tmp_.path() + "/trials/trial-" + std::to_string(trial) + "/summary.json";
    std::ifstream in(path);
    if (!in) {
      ADD_FAILURE() << "no " << path;
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(in);
  }
  TempDir tmp_;
};

TEST_F(HpoRanks, TrialsAreDataParallelRunsThatThePrunerCanStop) {
  const std::string launcher =
      "trial_launcher: \"timeout -k 10 300 mpirun --oversubscribe --bind-to none -np {ranks}\"\n";
  const std::string cfg = search(launcher + "trial_ranks: 2\n");
  const CliResult r = run_ftune("hpo run --config " + cfg + " --trials 2", kRootMpi);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json list = exported_trials(cfg);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  EXPECT_EQ(list[0]["state"], "COMPLETE") << list[0].dump();
  const nlohmann::json done = summary(0);
  EXPECT_EQ(done["data_parallel"]["ranks"], 2) << r.output;
  EXPECT_EQ(list[0]["value"].get<double>(), done["best_eval"]["accuracy"].get<double>());
  EXPECT_GE(list[0]["intermediate"].size(), 2u) << list[0].dump();  // one per evaluation
  EXPECT_EQ(list[1]["state"], "PRUNED") << list[1].dump();
  const nlohmann::json pruned = summary(1);  // both ranks stopped at a step, rank 0 wrote it
  EXPECT_EQ(pruned["status"], "interrupted") << r.output;
  EXPECT_LT(pruned["steps"].get<int>(), pruned["total_steps"].get<int>());

  // --trial-ranks 3 overrides the config (an uneven split of each step batch).
  const std::string cfg3 = search("fixed: {output.dir: " + tmp_.path() + "/three}\n" + launcher);
  const CliResult three =
      run_ftune("hpo run --config " + cfg3 + " --study three --trials 1 --trial-ranks 3", kRootMpi);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  const auto s3 = nlohmann::json::parse(std::ifstream(tmp_.path() + "/three/trial-0/summary.json"));
  EXPECT_EQ(s3["data_parallel"]["ranks"], 3);
}

TEST_F(HpoRanks, TrialRanksNeedTheTrainObjective) {
  const std::string path = tmp_.path() + "/command.yaml";
  std::ofstream(path) << "study: {name: c}\nstorage: sqlite:///" << tmp_.path() << "/c.db\n"
                      << "space: {x: {type: float, low: 0, high: 1}}\n"
                      << "objective: {command: \"echo value 1\"}\ntrial_ranks: 2\n";
  const CliResult r = run_ftune("hpo run --config " + path + " --trials 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'trial_ranks' applies to a train_config objective"), std::string::npos)
      << r.output;
}

// Two workers that mpirun started (as srun would start one per GPU): each trains its own trials
// in its own process; none becomes a rank of another's run.
TEST_F(HpoRanks, WorkersStartedByALauncherStayIndependent) {
  const std::string cfg = search("");
  const CliResult r = run_ftune_ranks(2, "hpo run --config " + cfg + " --trials 2 --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json list = exported_trials(cfg);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  for (const auto& t : list) {
    EXPECT_NE(t["state"], "FAIL") << t.dump();
    const nlohmann::json s = summary(t["number"].get<int>());
    EXPECT_FALSE(s.contains("data_parallel")) << s.dump();  // a plain single-process run
  }
}

}  // namespace
}  // namespace ftune::test
