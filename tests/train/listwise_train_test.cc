// Listwise training end to end on the CPU (training.loss listwise, issue 34): query groups of
// the pair task (tiny_model.h) — one "good" row among "bad" ones — trained with the group softmax,
// ranking metrics in evaluation choosing the best checkpoint (eval.metric group_accuracy), then
// `ftune eval --group-field` and `ftune predict --group-field` on the saved model; the same from
// FlagEmbedding's nested JSONL.
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
using json = nlohmann::json;

// Groups of 1 positive + `negatives` negatives of the pair task, each with a "qid"; with
// `nested`, FlagEmbedding's {"query", "pos", "neg"} lines instead (query = the positive's text).
void write_grouped_task(const std::string& path, int groups, int negatives, uint64_t seed,
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
      json neg = json::array();
      for (int k = 0; k < negatives; ++k) neg.push_back(bad.at(b++)["text_pair"]);
      out << json{{"query", good.at(g)["text"]}, {"pos", {good.at(g)["text_pair"]}}, {"neg", neg}}
                 .dump()
          << "\n";
      continue;
    }
    json pos = good.at(g);
    pos["qid"] = "q" + std::to_string(g);
    out << pos.dump() << "\n";
    for (int k = 0; k < negatives; ++k) {
      json n = bad.at(b++);
      n["qid"] = "q" + std::to_string(g);
      out << n.dump() << "\n";
    }
  }
}

json read_json_file_at(const std::string& path) {
  return json::parse(std::ifstream(path));
}

class ListwiseTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
  }
  std::string path(const std::string& name) const { return tmp_.path() + "/" + name; }
  std::string config(const std::string& data_extra) {
    const std::string p = path("config.yaml");
    std::ofstream out(p);
    out << "model:\n  path: " << model_ << "\ndata:\n  train: " << path("train.jsonl")
        << "\n  validation: " << path("val.jsonl") << "\n  max_length: 24\n  group_size: 4\n"
        << data_extra << "training:\n  loss: listwise\n  epochs: 3\n  batch_size: 4\n"
        << "  learning_rate: 3.0e-3\n  warmup_ratio: 0.05\n  log_every: 4\n  threads: 2\n"
        << "eval:\n  metric: group_accuracy\noutput:\n  dir: " << path("run")
        << "\n  progress: plain\n";
    return p;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(ListwiseTrain, LearnsToRankAndReportsRankingMetrics) {
  write_grouped_task(path("train.jsonl"), 48, 5, 1);
  write_grouped_task(path("val.jsonl"), 20, 5, 2);
  const CliResult r = run_ftune("train --config " + config("  group_field: qid\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("listwise: 48 query groups of 4 rows"), std::string::npos) << r.output;
  const json summary = read_json_file_at(path("run/summary.json"));
  EXPECT_EQ(summary["eval_metric"], "group_accuracy");
  const json& best = summary["best_eval"];
  EXPECT_EQ(best["groups"], 20);
  EXPECT_EQ(best["groups_without_positive"], 0);
  // Chance is 1/6 for group accuracy; the task is easy.
  EXPECT_GT(best["group_accuracy"].get<double>(), 0.8) << best.dump();
  EXPECT_GT(best["mrr@10"].get<double>(), 0.85);
  EXPECT_TRUE(best.contains("ndcg@10") && best.contains("map") && best.contains("recall@3"));

  // ftune eval: the same ranking metrics from the saved (best) model.
  const CliResult e =
      run_ftune("eval --model " + path("run/model") + " --data " + path("val.jsonl") +
                " --group-field qid --output " + path("eval.json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const json ev = read_json_file_at(path("eval.json"));
  EXPECT_NEAR(ev["group_accuracy"].get<double>(), best["group_accuracy"].get<double>(), 1e-9);
  EXPECT_NEAR(ev["mrr@10"].get<double>(), best["mrr@10"].get<double>(), 1e-5);

  // ftune predict: each row's rank in its group; rank 1 is the positive as often as accuracy says.
  const CliResult p =
      run_ftune("predict --model " + path("run/model") + " --data " + path("val.jsonl") +
                " --group-field qid --output " + path("pred.jsonl"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  std::ifstream preds(path("pred.jsonl")), val(path("val.jsonl"));
  std::map<std::string, int> firsts;
  int top_positive = 0;
  for (std::string pl, vl; std::getline(preds, pl) && std::getline(val, vl);) {
    const json pj = json::parse(pl), vj = json::parse(vl);
    EXPECT_EQ(pj["group"], vj["qid"]);
    if (pj["rank"] == 1) {
      ++firsts[pj["group"]];
      top_positive += vj["label"] == 1;
    }
  }
  EXPECT_EQ(firsts.size(), 20u);
  for (const auto& [g, n] : firsts) EXPECT_EQ(n, 1) << g;
  EXPECT_NEAR(top_positive / 20.0, ev["group_accuracy"].get<double>(), 0.051);
}

TEST_F(ListwiseTrain, FlagEmbeddingNestedRowsTrain) {
  write_grouped_task(path("train.jsonl"), 32, 3, 3, /*nested=*/true);
  write_grouped_task(path("val.jsonl"), 12, 3, 4, /*nested=*/true);
  const CliResult r = run_ftune("train --config " + config(""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json summary = read_json_file_at(path("run/summary.json"));
  EXPECT_EQ(summary["best_eval"]["groups"], 12);
  EXPECT_EQ(summary["data"]["train_file"]["groups"], 32);
  EXPECT_EQ(summary["data"]["train_file"]["format"], "jsonl");
  EXPECT_GT(summary["best_eval"]["group_accuracy"].get<double>(), 0.5);
}

TEST_F(ListwiseTrain, ARankingMetricNeedsGroups) {
  write_pair_task(path("train.jsonl"), 32, 1);
  write_pair_task(path("val.jsonl"), 16, 2);
  const std::string p = path("plain.yaml");
  std::ofstream(p) << "model:\n  path: " << model_ << "\ndata:\n  train: " << path("train.jsonl")
                   << "\n  validation: " << path("val.jsonl")
                   << "\ntraining:\n  epochs: 1\n  batch_size: 8\n  threads: 2\n"
                   << "eval:\n  metric: ndcg@10\noutput:\n  dir: " << path("run2") << "\n";
  const CliResult r = run_ftune("train --config " + p);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no query groups"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ftune::test
