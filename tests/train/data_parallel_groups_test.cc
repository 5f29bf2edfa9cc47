// Data-parallel runs of the tasks over query groups and of multi-label classification (issue 34),
// with OpenMPI's mpirun on the CPU: 2 ranks follow the trajectory of one process with the same
// effective batch, and report the same evaluation.
//   - listwise (a 2-label head, 3 groups of 4 rows a step, so a step's groups split 1 / 2 between
//     the ranks, never inside a group): per-step losses and final weights as one process's, and
//     the same ranking metrics at every evaluation; `ftune plan --ranks 2` plans whole groups;
//     a run killed in its second epoch resumes bit for bit;
//   - margin_mse (a one-score head, teacher scores): the same;
//   - multi_label_bce: the same trajectory, and the per-label thresholds, micro / macro F1 and
//     ROC-AUC of the evaluation gathered from both ranks: one process's `ftune eval` of the saved
//     model gives exactly the run's numbers.
//
// Tolerances. One process and 2 ranks compute the same rows with the same dropout masks; they
// differ only in the order in which the step's gradient is summed (each rank's micro-batches,
// then the ranks' sum, against one accumulation), a few float32 roundings (~1e-7 relative) per
// step, so per-step losses agree within 1e-6 relative and each weight tensor within 1e-5 of its
// largest value over 18 steps, as in data_parallel_test.cc. Tensors whose exact gradient is zero
// are left out: the key bias (trajectory_compare.h) and, for the group losses, the head's bias,
// whose gradient is a sum over each group of the scores' gradients, zero for a softmax over the
// group and for margins (on a 2-label head the score is logit 1 - logit 0: both biases' gradients
// cancel), so it moves only by rounding noise that Adam scales to steps of +-lr; for the same
// reason what depends on the scores' shift (a group loss run's pointwise validation loss, the MSE
// against the teacher) is not compared, and what does not (ranking metrics, Pearson, Spearman)
// is. Ranking metrics,
// F1 and subset accuracy are piecewise constant in the scores: they change only if two scores of a
// group (or a score and a threshold) lie within the ~1e-6 by which the runs' scores differ, which
// these seeded data do not have, so they are compared exactly (1e-12); per-label thresholds are
// midpoints of two validation logits, so within 1e-4 of one process's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"
#include "trajectory_compare.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The validation lines of metrics.jsonl, in order.
std::vector<json> validation_lines(const std::string& run) {
  std::vector<json> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j["split"] == "validation") out.push_back(j);
  }
  return out;
}

json summary_of(const std::string& run) {
  return json::parse(std::ifstream(run + "/summary.json"));
}

class DataParallelGroups : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_.path() + "/" + name; }
  // 2 epochs, 1 thread a rank, dropout on, the loss logged every step, evaluation every 4 steps
  // and at the end; `extra` adds keys to the data and training sections.
  std::string config(const std::string& run, const std::string& model, const std::string& data,
                     const std::string& training, const std::string& learning_rate = "3.0e-3") {
    const std::string p = path(run + ".yaml");
    std::ofstream(p) << "model:\n  path: " << model << "\ndata:\n  train: " << path("train.jsonl")
                     << "\n  validation: " << path("val.jsonl") << "\n  max_length: 24\n"
                     << data << "training:\n  epochs: 2\n  learning_rate: " << learning_rate << "\n"
                     << "  log_every: 1\n  threads: 1\n  hidden_dropout: 0.1\n"
                     << "  attention_dropout: 0.1\n"
                     << training << "eval:\n  every_steps: 4\ncheckpoint:\n  keep_last: 20\n"
                     << "output:\n  dir: " << path(run) << "\n  progress: plain\n";
    return p;
  }
  // One process, then 2 ranks, of the same config; both must complete.
  void run_both(const std::string& model, const std::string& data, const std::string& training,
                const std::string& learning_rate = "3.0e-3") {
    const CliResult one =
        run_ftune("train --config " + config("one", model, data, training, learning_rate));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const CliResult two = run_ftune_ranks(
        2, "train --config " + config("two", model, data, training, learning_rate));
    ASSERT_EQ(two.exit_code, 0) << two.output;
    EXPECT_EQ(summary_of(path("two"))["data_parallel"]["ranks"], 2);
  }
  // Every validation line of the 2-rank run has one process's `exact` metrics (1e-12) and, with
  // `loss`, its loss (1e-5 relative).
  void expect_same_evaluations(const std::vector<std::string>& exact, bool loss) {
    const std::vector<json> a = validation_lines(path("one")), b = validation_lines(path("two"));
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GE(a.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE("evaluation at step " + a[i]["step"].dump());
      EXPECT_EQ(a[i]["step"], b[i]["step"]);
      for (const std::string& key : exact) {
        ASSERT_TRUE(a[i].contains(key) && a[i][key].is_number()) << key << ": " << a[i].dump();
        EXPECT_NEAR(b[i][key].get<double>(), a[i][key].get<double>(), 1e-12) << key;
      }
      if (loss)
        EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                    1e-5 * std::fabs(a[i]["loss"].get<double>()));
    }
  }
  TempDir tmp_;
};

const std::vector<std::string> kRankingKeys = {
    "groups", "ndcg@1", "ndcg@3", "ndcg@10", "mrr@10", "map", "recall@1", "recall@3",
    "group_accuracy"};

// 26 groups, 3 a step: 9 steps an epoch (the last of 2 groups), 18 steps. Each step's 3 groups of
// 4 rows split 1 / 2 between the ranks: rows [0, 4) and [4, 12), where an even cut of the rows
// ([0, 6), [6, 12)) would cut the second group.
TEST_F(DataParallelGroups, ListwiseTwoRanksFollowOneProcessWithWholeGroups) {
  const std::string model = path("tiny");
  write_tiny_bert(model);  // two labels: the score is logit 1 - logit 0
  write_query_groups(path("train.jsonl"), 26, 11);
  write_query_groups(path("val.jsonl"), 15, 12);
  const std::string data = "  group_field: qid\n  group_size: 4\n";
  const std::string training =
      "  loss: listwise\n  batch_size: 1\n  gradient_accumulation: 3\n";
  run_both(model, data, training);
  expect_same_trajectory(path("one"), path("two"),
                         TrajectoryTolerance{18, 1e-6, 1e-5, "/model/model.safetensors",
                                             {"classifier.bias"}});
  // Not the pointwise validation loss: it depends on the head's bias (left out above).
  expect_same_evaluations(kRankingKeys, false);
  const json best = summary_of(path("two"))["best_eval"];
  EXPECT_EQ(best["groups"], 15);
  EXPECT_LT(best["ndcg@10"].get<double>(), 1.0) << best.dump();  // not a saturated metric

  // The memory plan of each rank: at most 2 whole groups of a step of 3 (8 rows, not 6).
  const CliResult plan = run_ftune("plan --json --ranks 2 --config " + path("two.yaml"), "",
                                   Streams::kStdout);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(json::parse(plan.output)["effective_batch"], 8) << plan.output;
}

// The groups drawn for a step depend only on (seed, epoch): a 2-rank listwise run whose rank 1
// is killed in step 13 (in the second epoch; steps 1-8 are 2 micro-batches of rank 1's, step 9
// one, steps 10-12 two each: its 24th forward pass) resumes on 2 ranks from the checkpoint of
// step 12 (the evaluation's), drawing the second epoch's groups afresh, and ends bit for bit as
// the uninterrupted run.
TEST_F(DataParallelGroups, ListwiseRanksResumeInTheSecondEpochBitForBit) {
  const std::string model = path("tiny");
  write_tiny_bert(model);
  write_query_groups(path("train.jsonl"), 26, 15);
  write_query_groups(path("val.jsonl"), 9, 16);
  const std::string data = "  group_field: qid\n  group_size: 4\n";
  const std::string training = "  loss: listwise\n  batch_size: 1\n  gradient_accumulation: 3\n";
  const CliResult full =
      run_ftune_ranks(2, "train --config " + config("full", model, data, training));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string cut = config("cut", model, data, training);
  const CliResult killed =
      run_ftune_ranks(2, "train --config " + cut, "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=24");
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  ASSERT_TRUE(fs::exists(path("cut/checkpoints/step-0000012"))) << killed.output;
  ASSERT_FALSE(fs::exists(path("cut/checkpoints/step-0000016"))) << killed.output;
  const CliResult resumed = run_ftune_ranks(2, "train --config " + cut + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(logged_metrics(path("full")), logged_metrics(path("cut")));
  const std::string weights = file_bytes(path("full/model/model.safetensors"));
  ASSERT_FALSE(weights.empty());
  EXPECT_TRUE(weights == file_bytes(path("cut/model/model.safetensors"))) << "final weights differ";
}

// MarginMSE on a one-score head: the same, with the regression metrics against the teacher.
TEST_F(DataParallelGroups, MarginMseTwoRanksFollowOneProcess) {
  const std::string model = path("tiny1");
  write_tiny_bert(model, 1);
  write_query_groups(path("train.jsonl"), 26, 13, /*teacher=*/true);
  write_query_groups(path("val.jsonl"), 15, 14, /*teacher=*/true);
  const std::string data = "  group_field: qid\n  group_size: 4\n  teacher_field: teacher\n";
  const std::string training =
      "  loss: margin_mse\n  batch_size: 1\n  gradient_accumulation: 3\n";
  run_both(model, data, training);
  expect_same_trajectory(path("one"), path("two"),
                         TrajectoryTolerance{18, 1e-6, 1e-5, "/model/model.safetensors",
                                             {"classifier.bias"}});
  std::vector<std::string> keys = kRankingKeys;
  keys.push_back("rows");
  // Not the loss nor mse against the teacher: they depend on the scores' shift, the head's bias.
  expect_same_evaluations(keys, false);
  // Correlations with the teacher, shift-invariant and continuous in the scores.
  const json a = summary_of(path("one"))["best_eval"], b = summary_of(path("two"))["best_eval"];
  for (const char* k : {"pearson", "spearman"})
    EXPECT_NEAR(b[k].get<double>(), a[k].get<double>(), 1e-5) << k;
}

// Multi-label: 96 training rows, 8 a step (4 a micro-batch), 24 steps; 42 validation rows in 11
// batches of 4, 5 evaluated by rank 0 and 6 by rank 1.
TEST_F(DataParallelGroups, MultiLabelTwoRanksFollowOneProcessAndGatherTheEvaluation) {
  // Labels from the second text: "good" / "bad" as it starts, "alone" when it has no other word.
  for (const std::string name : {"train.jsonl", "val.jsonl"}) {
    write_pair_task(path(name) + ".src", name == "train.jsonl" ? 96 : 42, name.size() + 20);
    std::ifstream in(path(name) + ".src");
    std::ofstream out(path(name));
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      const std::string pair = j["text_pair"];
      json labels = json::array();
      if (pair.rfind("good", 0) == 0) labels.push_back("good");
      if (pair.rfind("bad", 0) == 0) labels.push_back("bad");
      if (pair.find(' ') == std::string::npos) labels.push_back("alone");
      j["label"] = labels;
      out << j.dump() << "\n";
    }
  }
  const std::string model = path("ml");
  write_tiny_bert(model);
  run_both(model, "",
           "  loss: multi_label_bce\n  batch_size: 4\n  gradient_accumulation: 2\n", "1.0e-2");
  expect_same_trajectory(path("one"), path("two"), TrajectoryTolerance{24});
  expect_same_evaluations({"rows", "micro_f1", "macro_f1", "subset_accuracy", "macro_roc_auc"},
                          true);
  const std::vector<json> a = validation_lines(path("one")), b = validation_lines(path("two"));
  for (size_t i = 0; i < a.size(); ++i) {
    const json &ta = a[i]["at_threshold"], &tb = b[i]["at_threshold"];
    for (const char* k : {"micro_f1", "macro_f1", "subset_accuracy"})
      EXPECT_NEAR(tb[k].get<double>(), ta[k].get<double>(), 1e-12) << k;
    ASSERT_EQ(tb["margins"].size(), 3u);
    for (size_t c = 0; c < 3; ++c)
      EXPECT_NEAR(tb["margins"][c].get<double>(), ta["margins"][c].get<double>(), 1e-4) << c;
  }

  // The 2-rank run's selected model evaluated by one process on the validation file, at the
  // thresholds the run chose: the very numbers the ranks reported together.
  const json best = summary_of(path("two"))["best_eval"];
  EXPECT_EQ(best["rows"], 42);
  EXPECT_LT(best["micro_f1"].get<double>(), 1.0) << best.dump();  // not a saturated metric
  const CliResult e = run_ftune("eval --model " + path("two/model") + " --data " +
                                path("val.jsonl") + " --output " + path("eval.json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const json ev = json::parse(std::ifstream(path("eval.json")));
  EXPECT_NEAR(ev["macro_roc_auc"].get<double>(), best["macro_roc_auc"].get<double>(), 1e-9);
  for (const char* k : {"micro_f1", "macro_f1", "subset_accuracy"})
    EXPECT_NEAR(ev["at_threshold"][k].get<double>(), best["at_threshold"][k].get<double>(), 1e-9)
        << k;
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(ev["at_threshold"]["per_label"][c]["support"],
              best["at_threshold"]["per_label"][c]["support"]);
    EXPECT_NEAR(ev["at_threshold"]["per_label"][c]["f1"].get<double>(),
                best["at_threshold"]["per_label"][c]["f1"].get<double>(), 1e-9);
  }
}

}  // namespace
}  // namespace ftune::test
