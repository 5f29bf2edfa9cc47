// Query-group losses on a one-score head end to end on the CPU (issue 34): training.loss listwise
// (and auto with query groups) on a num_labels 1 checkpoint trains the single logit as
// FlagEmbedding does and keeps the head as shipped; evaluation gives ranking metrics and binary
// metrics on the logit; training.loss margin_mse distils a teacher's margins; bad input (no
// teacher column, a non-numeric teacher score, listwise on more than 2 classes) is refused with
// the key or file:line.
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
using json = nlohmann::json;

// Groups of 1 positive ("good") + `negatives` negatives of the pair task, with a "qid" and a
// teacher's "teacher" score (higher for the positive); `nested`: FlagEmbedding's rows with
// pos_scores / neg_scores instead.
void write_onescore_groups(const std::string& path, int groups, int negatives, uint64_t seed,
                           bool nested = false) {
  const std::string source = path + ".rows";
  write_pair_task(source, groups * (negatives + 1) * 3, seed);
  std::vector<json> good, bad;
  std::ifstream in(source);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    (j["label"] == 1 ? good : bad).push_back(j);
  }
  fs::remove(source);
  std::ofstream out(path);
  for (int g = 0, b = 0; g < groups; ++g) {
    if (nested) {
      json neg = json::array(), neg_scores = json::array();
      for (int k = 0; k < negatives; ++k) {
        neg.push_back(bad.at(b++)["text_pair"]);
        neg_scores.push_back(-1.0 - 0.25 * k);
      }
      out << json{{"query", good.at(g)["text"]},
                  {"pos", {good.at(g)["text_pair"]}},
                  {"neg", neg},
                  {"pos_scores", {2.5}},
                  {"neg_scores", neg_scores}}
                 .dump()
          << "\n";
      continue;
    }
    json pos = good.at(g);
    pos["qid"] = "q" + std::to_string(g);
    pos["teacher"] = 2.5 + 0.1 * (g % 3);
    out << pos.dump() << "\n";
    for (int k = 0; k < negatives; ++k) {
      json n = bad.at(b++);
      n["qid"] = "q" + std::to_string(g);
      n["teacher"] = -1.0 - 0.25 * k;
      out << n.dump() << "\n";
    }
  }
}

json read_onescore_json(const std::string& path) {
  return json::parse(std::ifstream(path));
}

class OneScoreGroups : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny1";
    write_tiny_bert(model_, 1);
  }
  std::string path(const std::string& name) const { return tmp_.path() + "/" + name; }
  std::string config(const std::string& data_extra, const std::string& loss,
                     const std::string& model = "") {
    const std::string p = path("config.yaml");
    std::ofstream out(p);
    out << "model:\n  path: " << (model.empty() ? model_ : model)
        << "\ndata:\n  train: " << path("train.jsonl") << "\n  validation: " << path("val.jsonl")
        << "\n  max_length: 24\n  group_size: 4\n"
        << data_extra << "training:\n  loss: " << loss << "\n  epochs: 3\n  batch_size: 4\n"
        << "  learning_rate: 3.0e-3\n  warmup_ratio: 0.05\n  log_every: 4\n  threads: 2\n"
        << "output:\n  dir: " << path("run") << "\n  progress: plain\n";
    return p;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(OneScoreGroups, ListwiseKeepsTheOneLogitHeadAndReportsRankingAndBinaryMetrics) {
  write_onescore_groups(path("train.jsonl"), 48, 5, 1);
  write_onescore_groups(path("val.jsonl"), 20, 5, 2);
  const CliResult r = run_ftune("train --config " + config("  group_field: qid\n", "listwise"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("listwise: 48 query groups of 4 rows"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("made anew"), std::string::npos) << r.output;
  const json saved = read_onescore_json(path("run/model/config.json"));
  EXPECT_EQ(saved["id2label"].size(), 1u) << saved.dump();
  EXPECT_FALSE(saved.contains("problem_type") && saved["problem_type"].is_string());
  const json summary = read_onescore_json(path("run/summary.json"));
  EXPECT_EQ(summary["eval_metric"], "ndcg@10");
  const json& best = summary["best_eval"];
  EXPECT_EQ(best["groups"], 20);
  EXPECT_GT(best["group_accuracy"].get<double>(), 0.8) << best.dump();
  EXPECT_GT(best["mrr@10"].get<double>(), 0.85);
  // Pointwise binary metrics on the logit: ROC-AUC and F1 at a threshold chosen on sigmoid.
  ASSERT_TRUE(best.contains("roc_auc") && best["roc_auc"].is_number()) << best.dump();
  EXPECT_GT(best["roc_auc"].get<double>(), 0.8);
  ASSERT_TRUE(best.contains("at_threshold")) << best.dump();
  EXPECT_TRUE(best["at_threshold"].contains("f1"));
  // ftune eval --group-field on the saved one-score model: the label column as relevance, the
  // same ranking metrics.
  const CliResult e =
      run_ftune("eval --model " + path("run/model") + " --data " + path("val.jsonl") +
                " --group-field qid --output " + path("eval.json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const json ev = read_onescore_json(path("eval.json"));
  EXPECT_EQ(ev["groups_without_positive"], 0) << ev.dump();
  EXPECT_NEAR(ev["group_accuracy"].get<double>(), best["group_accuracy"].get<double>(), 1e-9);
  EXPECT_NEAR(ev["mrr@10"].get<double>(), best["mrr@10"].get<double>(), 1e-5);
  // ftune predict on the saved model: one score per row.
  const CliResult p = run_ftune("predict --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("pred.jsonl"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  std::ifstream preds(path("pred.jsonl"));
  std::string first;
  ASSERT_TRUE(std::getline(preds, first));
  EXPECT_EQ(json::parse(first)["logits"].size(), 1u) << first;
}

TEST_F(OneScoreGroups, AutoOnAOneScoreCheckpointWithGroupsIsListwise) {
  write_onescore_groups(path("train.jsonl"), 24, 3, 5, /*nested=*/true);
  write_onescore_groups(path("val.jsonl"), 8, 3, 6, /*nested=*/true);
  const CliResult r = run_ftune("train --config " + config("", "auto") + " training.epochs=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("listwise: 24 query groups"), std::string::npos) << r.output;
  EXPECT_EQ(read_onescore_json(path("run/model/config.json"))["id2label"].size(), 1u);
}

TEST_F(OneScoreGroups, MarginMseDistilsTheTeachersMargins) {
  write_onescore_groups(path("train.jsonl"), 48, 3, 7);
  write_onescore_groups(path("val.jsonl"), 16, 3, 8);
  const CliResult r = run_ftune(
      "train --config " + config("  group_field: qid\n  teacher_field: teacher\n", "margin_mse"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("margin_mse: 48 query groups of 4 rows"), std::string::npos) << r.output;
  const json summary = read_onescore_json(path("run/summary.json"));
  const json& best = summary["best_eval"];
  // Evaluated against the teacher (regression metrics) and as a ranking (its top row relevant).
  EXPECT_TRUE(best.contains("mse") && best.contains("pearson")) << best.dump();
  EXPECT_EQ(best["groups"], 16);
  EXPECT_EQ(best["groups_without_positive"], 0);
  EXPECT_GT(best["group_accuracy"].get<double>(), 0.8) << best.dump();
  // The training loss fell.
  std::ifstream metrics(path("run/metrics.jsonl"));
  double first = -1, last = -1;
  for (std::string line; std::getline(metrics, line);) {
    const json j = json::parse(line);
    if (j["split"] != "train") continue;
    if (first < 0) first = j["loss"].get<double>();
    last = j["loss"].get<double>();
  }
  EXPECT_LT(last, first);
  EXPECT_EQ(read_onescore_json(path("run/model/config.json"))["id2label"].size(), 1u);
}

TEST_F(OneScoreGroups, MarginMseReadsFlagEmbeddingTeacherScores) {
  write_onescore_groups(path("train.jsonl"), 24, 3, 9, /*nested=*/true);
  write_onescore_groups(path("val.jsonl"), 8, 3, 10, /*nested=*/true);
  const CliResult r =
      run_ftune("train --config " + config("", "margin_mse") + " training.epochs=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json summary = read_onescore_json(path("run/summary.json"));
  EXPECT_EQ(summary["best_eval"]["groups_without_positive"], 0) << summary["best_eval"].dump();
}

TEST_F(OneScoreGroups, BadInputIsRefusedNamingTheKeyOrLine) {
  write_onescore_groups(path("train.jsonl"), 12, 3, 11);
  write_onescore_groups(path("val.jsonl"), 4, 3, 12);
  // margin_mse without a teacher column: the default data.teacher_field is missing on every row.
  CliResult r = run_ftune("train --config " + config("  group_field: qid\n", "margin_mse"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.jsonl:1: missing 'teacher_score'"), std::string::npos) << r.output;
  // A teacher score that is not a number.
  {
    std::ifstream in(path("train.jsonl"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    json j = json::parse(lines[2]);
    j["teacher"] = "high";
    lines[2] = j.dump();
    std::ofstream out(path("train.jsonl"));
    for (const auto& l : lines) out << l << "\n";
  }
  r = run_ftune("train --config " +
                config("  group_field: qid\n  teacher_field: teacher\n", "margin_mse"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.jsonl:3:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("score 'high' is not a number"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(path("run/model")));
  // FlagEmbedding rows without the teacher's scores.
  write_onescore_groups(path("nested.jsonl"), 4, 3, 13, /*nested=*/true);
  {
    std::ifstream in(path("nested.jsonl"));
    std::string line;
    std::getline(in, line);
    json j = json::parse(line);
    j.erase("neg_scores");
    std::ofstream(path("train.jsonl")) << j.dump() << "\n";
  }
  r = run_ftune("train --config " + config("", "margin_mse") + " data.validation=''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.jsonl:1: missing 'neg_scores'"), std::string::npos) << r.output;
  // A graded label on a one-score head trained listwise: a bad row.
  write_onescore_groups(path("train.jsonl"), 12, 3, 15);
  {
    std::ifstream in(path("train.jsonl"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    json j = json::parse(lines[0]);
    j["label"] = 2;
    lines[0] = j.dump();
    std::ofstream out(path("train.jsonl"));
    for (const auto& l : lines) out << l << "\n";
  }
  r = run_ftune("train --config " + config("  group_field: qid\n", "listwise") +
                " data.validation=''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.jsonl:1: target 2 is outside [0, 1] (training.loss listwise"),
            std::string::npos)
      << r.output;
  // listwise on more than 2 classes.
  write_onescore_groups(path("train.jsonl"), 12, 3, 14);
  {
    std::ifstream in(path("train.jsonl"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::ofstream out(path("train.jsonl"));
    for (size_t i = 0; i < lines.size(); ++i) {
      json j = json::parse(lines[i]);
      if (j["label"] == 0 && i % 2 == 0) j["label"] = 2;
      out << j.dump() << "\n";
    }
  }
  const std::string three = path("tiny3");
  write_tiny_bert(three, 3);
  r = run_ftune("train --config " + config("  group_field: qid\n", "listwise", three) +
                " data.validation=''");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("key 'training.loss': listwise ranks one score per row"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ftune::test
