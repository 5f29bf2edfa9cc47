// `ftune hpo run` over query groups (issue 34): the in-process training objective with k = 3
// folds of a listwise reranker task. The folds split the training file by group (no query in two
// folds, and within a fold none in both its training and validation parts), and the trial's value
// is the mean over the folds of the best validation ndcg@10.
//
// How disjointness is read from the runs: each fold's run reports the groups of its validation
// part (best_eval.groups, every group with a row there, with or without a relevant row) and of
// its training part (listwise.groups: those with a relevant and an irrelevant row; every group of
// this file has both). The k validation parts cover every row once (rows summed = the file's), so
// their group counts sum to the file's 30 groups exactly when no group has rows in two folds, and
// a fold's training and validation groups sum to 30 exactly when none is in both.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpo_export.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kQueryGroups = 30;

TEST(HpoGroups, FoldsKeepQueryGroupsWholeAndTheObjectiveIsTheirMeanNdcg) {
  TempDir tmp;
  const std::string dir = tmp.path();
  write_tiny_bert(dir + "/tiny");
  write_query_groups(dir + "/groups.jsonl", kQueryGroups, 21);
  int64_t file_rows = 0;
  {
    std::ifstream in(dir + "/groups.jsonl");
    for (std::string line; std::getline(in, line);) file_rows += !line.empty();
  }
  std::ofstream(dir + "/train.yaml")
      << "model: {path: " << dir << "/tiny}\n"
      << "data: {train: " << dir << "/groups.jsonl, group_field: qid, group_size: 4, "
      << "max_length: 24}\n"
      << "training: {loss: listwise, epochs: 1, batch_size: 2, effective_batch_size: 4, "
      << "learning_rate: 3.0e-3, threads: 2}\n"
      << "output: {dir: " << dir << "/trials, progress: plain}\n";
  const std::string search = dir + "/search.yaml";
  std::ofstream(search) << "study: {name: groups, direction: maximize, metric: eval.ndcg@10}\n"
                        << "storage: sqlite:///" << dir << "/study.db\n"
                        << "sampler: {type: random}\n"
                        << "space:\n"
                        << "  training.learning_rate: {type: float, low: 1.0e-4, high: 3.0e-3, "
                           "log: true}\n"
                        << "objective: {train_config: train.yaml}\n"
                        << "folds: 3\n";
  const CliResult r = run_ftune("hpo run --config " + search + " --trials 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json list = exported_trials(search, dir);
  ASSERT_EQ(list.size(), 2u) << list.dump();
  for (const auto& t : list) {
    EXPECT_EQ(t["state"], "COMPLETE") << t.dump();
    const int n = t["number"].get<int>();
    double sum = 0;
    int64_t validation_groups = 0, validation_rows = 0;
    for (int fold = 0; fold < 3; ++fold) {
      SCOPED_TRACE("trial " + std::to_string(n) + " fold " + std::to_string(fold));
      const std::string run =
          dir + "/trials/trial-" + std::to_string(n) + "/fold-" + std::to_string(fold);
      const json s = json::parse(std::ifstream(run + "/summary.json"));
      EXPECT_EQ(s["eval_metric"], "ndcg@10");
      const json& best = s["best_eval"];
      EXPECT_EQ(best["groups_without_positive"], 0);
      // No group both in this fold's training part and in its validation part.
      EXPECT_EQ(s["listwise"]["groups"].get<int64_t>() + best["groups"].get<int64_t>(),
                kQueryGroups);
      validation_groups += best["groups"].get<int64_t>();
      validation_rows += best["rows"].get<int64_t>();
      sum += best["ndcg@10"].get<double>();
    }
    // Every row validates in one fold; no group in two folds.
    EXPECT_EQ(validation_rows, file_rows);
    EXPECT_EQ(validation_groups, kQueryGroups);
    EXPECT_NEAR(t["value"].get<double>(), sum / 3, 1e-12) << t.dump();
  }
}

}  // namespace
}  // namespace ftune::test
