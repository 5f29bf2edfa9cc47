// Single-score models through the CLI (docs/rerankers.md): a one-logit checkpoint
// keeps its head and trains with BCE (binary metrics on the score, a threshold chosen on
// validation, predict's score / probability / decision, eval's metrics equal to training's);
// `predict` on an untrained one-logit checkpoint gives transformers' logit (the golden fixture of
// tools/make_score_fixtures.py); a regression head trains with MSE and reports Pearson and
// Spearman, minimising eval.metric mse; distillation from a teacher column; a new head only when
// asked, and said so; bad targets refused naming file:line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json_at(const std::string& path) {
  return json::parse(std::ifstream(path));
}

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The pair task (tiny_model.h) with its 0/1 label mapped by `label` (a JSON value per row), and
// optionally a teacher column.
void write_score_task(const std::string& path, int n, uint64_t seed,
                      const std::function<json(int good, int row)>& label,
                      const std::string& teacher_key = "") {
  const std::string source = path + ".source";
  write_pair_task(source, n, seed);
  std::ifstream in(source);
  std::ofstream out(path);
  int row = 0;
  for (std::string line; std::getline(in, line); ++row) {
    json j = json::parse(line);
    const int good = j["label"].get<int>();
    j["label"] = label(good, row);
    if (!teacher_key.empty())
      j[teacher_key] = good ? 3.0 + 0.1 * (row % 5) : -2.0 - 0.1 * (row % 3);
    out << j.dump() << "\n";
  }
  fs::remove(source);
}

class ScoresCli : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_.path() + "/" + name; }
  std::string config(const std::string& model, const std::string& training = "",
                     const std::string& extra = "") {
    const std::string p = path("config.yaml");
    std::ofstream out(p);
    out << "model:\n  path: " << model << "\ndata:\n  train: " << path("train.jsonl")
        << "\n  validation: " << path("val.jsonl") << "\n  max_length: 24\n"
        << "training:\n  epochs: 3\n  batch_size: 16\n  learning_rate: 3.0e-3\n"
        << "  warmup_ratio: 0.05\n  log_every: 8\n  threads: 2\n"
        << training << extra << "output:\n  dir: " << path("run") << "\n  progress: plain\n";
    return p;
  }
  TempDir tmp_;
};

TEST_F(ScoresCli, OneLogitHeadIsKeptTrainedWithBceAndPredictsScores) {
  const std::string model = path("one");
  write_tiny_bert(model, 1);
  const auto binary = [](int good, int) { return json(good); };
  write_score_task(path("train.jsonl"), 256, 1, binary);
  write_score_task(path("val.jsonl"), 64, 2, binary);
  const CliResult r = run_ftune("train --config " + config(model));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("task: one score per row, training.loss bce, the head of " + model + " kept"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("made anew"), std::string::npos) << "the one-logit head is kept";
  EXPECT_EQ(r.output.find("newly initialised"), std::string::npos) << r.output;
  const json summary = read_json_at(path("run/summary.json"));
  EXPECT_EQ(summary["labels"], json::array({"LABEL_0"}));
  const json& best = summary["best_eval"];
  EXPECT_GT(best["roc_auc"].get<double>(), 0.9) << best.dump();
  EXPECT_GT(best["at_threshold"]["accuracy"].get<double>(), 0.85) << best.dump();
  const json cfg = read_json_at(path("run/model/config.json"));
  EXPECT_EQ(cfg["id2label"], (json{{"0", "LABEL_0"}}));
  EXPECT_FALSE(cfg.contains("problem_type"));
  EXPECT_FALSE(cfg.contains("num_labels"));  // as transformers 5 writes it: id2label carries it
  {
    const io::SafetensorsFile w = io::SafetensorsFile::open(path("run/model/model.safetensors"));
    EXPECT_EQ(w.at("classifier.weight").shape, (std::vector<int64_t>{1, 32}));
  }
  if (const char* out = std::getenv("FTUNE_SCORES_OUT"))  // tools/make_score_fixtures.py --check
    fs::copy(path("run/model"), std::string(out) + "/bce",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);

  const CliResult p = run_ftune("predict --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("pred.jsonl"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::vector<json> preds = read_lines(path("pred.jsonl")),
                          val = read_lines(path("val.jsonl"));
  ASSERT_EQ(preds.size(), 64u);
  int right = 0;
  for (size_t i = 0; i < preds.size(); ++i) {
    const double s = preds[i]["score"].get<double>();
    EXPECT_NEAR(preds[i]["probability"].get<double>(), 1.0 / (1.0 + std::exp(-s)), 1e-12);
    EXPECT_EQ(preds[i]["logits"], json::array({preds[i]["score"]}));
    ASSERT_TRUE(preds[i].contains("decision"));  // the threshold chosen on validation
    right += preds[i]["decision"].get<bool>() == (val[i]["label"].get<int>() == 1);
  }
  EXPECT_EQ(right, std::lround(best["at_threshold"]["accuracy"].get<double>() * 64));

  const CliResult e = run_ftune("eval --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("eval.json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const json ev = read_json_at(path("eval.json"));
  EXPECT_NEAR(ev["roc_auc"].get<double>(), best["roc_auc"].get<double>(), 1e-12);
  EXPECT_NEAR(ev["loss"].get<double>(), best["loss"].get<double>(), 1e-5);
}

TEST_F(ScoresCli, PredictOnAnUntrainedOneLogitCheckpointGivesTransformersLogits) {
  // The golden fixture's model and batch: predict reads the token ids, transformers' logits are in
  // expected.safetensors.
  for (const std::string name : {"bert_score_bce", "xlmr_score_bce", "bert_regression_mse"}) {
    SCOPED_TRACE(name);
    const std::string dir = fixtures_dir() + "/engine/" + name;
    const io::SafetensorsFile inputs = io::SafetensorsFile::open(dir + "/inputs.safetensors");
    const HostTensor ids = inputs.read("input_ids", DType::I64);
    const HostTensor types = inputs.read("token_type_ids", DType::I64);
    const HostTensor mask = inputs.read("attention_mask", DType::I64);
    const int64_t B = inputs.at("input_ids").shape[0], T = inputs.at("input_ids").shape[1];
    {
      std::ofstream out(path("ids.jsonl"));
      for (int64_t b = 0; b < B; ++b) {
        json row{{"input_ids", json::array()}, {"token_type_ids", json::array()}};
        for (int64_t t = 0; t < T && mask.data<int64_t>()[b * T + t]; ++t) {
          row["input_ids"].push_back(ids.data<int64_t>()[b * T + t]);
          row["token_type_ids"].push_back(types.data<int64_t>()[b * T + t]);
        }
        out << row.dump() << "\n";
      }
    }
    const CliResult p = run_ftune("predict --model " + dir + "/model --data " + path("ids.jsonl") +
                                  " --output " + path("ids_pred.jsonl"));
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const std::vector<json> preds = read_lines(path("ids_pred.jsonl"));
    const HostTensor want =
        io::SafetensorsFile::open(dir + "/expected.safetensors").read("logits", DType::F32);
    ASSERT_EQ(static_cast<int64_t>(preds.size()), B);
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_NEAR(preds[b]["score"].get<double>(), want.data<float>()[b], 1e-5) << b;
      // A regression head's score has no probability.
      EXPECT_EQ(preds[b].contains("probability"), name != "bert_regression_mse");
    }
  }
}

TEST_F(ScoresCli, RegressionTrainsWithMseAndMinimisesMse) {
  const std::string model = path("reg");
  write_tiny_bert(model, 1);
  {
    json cfg = read_json_at(model + "/config.json");
    cfg["problem_type"] = "regression";
    std::ofstream(model + "/config.json") << cfg.dump(2);
  }
  // STS-B-style: 4.x for "good" pairs, 1.x for "bad" ones.
  const auto sts = [](int good, int row) { return json((good ? 4.0 : 1.0) + 0.25 * (row % 4)); };
  write_score_task(path("train.jsonl"), 256, 3, sts);
  write_score_task(path("val.jsonl"), 64, 4, sts);
  // MSE on targets around 2.5 needs a larger step than the BCE runs (the score must travel).
  const CliResult r =
      run_ftune("train --config " + config(model, "", "eval:\n  metric: mse\n  every_steps: 8\n") +
                " training.learning_rate=1.0e-2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training.loss mse"), std::string::npos) << r.output;
  const json summary = read_json_at(path("run/summary.json"));
  EXPECT_EQ(summary["eval_metric"], "mse");
  const json& best = summary["best_eval"];
  EXPECT_GT(best["pearson"].get<double>(), 0.8) << best.dump();
  EXPECT_GT(best["spearman"].get<double>(), 0.7) << best.dump();
  // The best evaluation is the one with the lowest mse (a minimised metric).
  double lowest = 1e300;
  for (const json& line : read_lines(path("run/metrics.jsonl")))
    if (line["split"] == "validation") lowest = std::min(lowest, line["mse"].get<double>());
  EXPECT_DOUBLE_EQ(best["mse"].get<double>(), lowest);
  EXPECT_EQ(read_json_at(path("run/model/config.json"))["problem_type"], "regression");
  if (const char* out = std::getenv("FTUNE_SCORES_OUT"))
    fs::copy(path("run/model"), std::string(out) + "/regression",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);

  const CliResult e = run_ftune("eval --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("eval.json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const json ev = read_json_at(path("eval.json"));
  // The same scores up to float summation order (eval batches padded, training's packed).
  EXPECT_NEAR(ev["pearson"].get<double>(), best["pearson"].get<double>(), 1e-5);
  EXPECT_NEAR(ev["mse"].get<double>(), best["mse"].get<double>(), 1e-6 * best["mse"].get<double>());
  const CliResult p = run_ftune("predict --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("pred.jsonl"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const json first = read_lines(path("pred.jsonl")).front();
  EXPECT_TRUE(first.contains("score"));
  EXPECT_FALSE(first.contains("probability"));
  // The report shows the regression metrics.
  const CliResult rep = run_ftune("report " + path("run") + " --output " + path("r.html"));
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  std::ifstream html(path("r.html"));
  const std::string page((std::istreambuf_iterator<char>(html)), {});
  EXPECT_NE(page.find("<th>pearson</th>"), std::string::npos);
}

TEST_F(ScoresCli, RegressionEvaluationOverTwoRanksSeesEveryRow) {
  // Each rank evaluates a share of the batches; the (score, target) pairs are gathered so that
  // every rank's Spearman ranks all the rows: the same metrics as one process.
  const std::string model = path("reg");
  write_tiny_bert(model, 1);
  const auto sts = [](int good, int row) { return json((good ? 4.0 : 1.0) + 0.25 * (row % 4)); };
  write_score_task(path("train.jsonl"), 64, 3, sts);
  write_score_task(path("val.jsonl"), 48, 4, sts);
  const std::string cfg =
      config(model, "  loss: mse\n") +
      " training.epochs=1 training.batch_size=4 training.effective_batch_size=8";
  const CliResult one = run_ftune("train --config " + cfg);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const json a = read_json_at(path("run/summary.json"))["best_eval"];
  fs::remove_all(path("run"));
  const CliResult two = run_ftune_ranks(2, "train --config " + cfg);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const json b = read_json_at(path("run/summary.json"))["best_eval"];
  EXPECT_EQ(b["rows"], 48);
  for (const char* k : {"mse", "mae", "pearson", "spearman"})
    EXPECT_NEAR(b[k].get<double>(), a[k].get<double>(), 1e-5) << k;
}

TEST_F(ScoresCli, DistillationFromATeacherColumnOnANewHeadSaysSo) {
  // A two-label checkpoint asked for distill_mse: one score, a new head, said in the log.
  const std::string model = path("two");
  write_tiny_bert(model, 2);
  const auto any = [](int good, int) { return json(good); };
  write_score_task(path("train.jsonl"), 128, 5, any, "teacher");
  write_score_task(path("val.jsonl"), 32, 6, any, "teacher");
  const CliResult r = run_ftune("train --config " + config(model, "  loss: distill_mse\n") +
                                " data.teacher_field=teacher training.learning_rate=1.0e-2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("its config has 2 labels; this task has 1 (one score): the output layer "
                          "is made anew"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("targets from column 'teacher'"), std::string::npos) << r.output;
  const json summary = read_json_at(path("run/summary.json"));
  EXPECT_EQ(summary["eval_metric"], "mse");  // auto for distillation: the teacher's scale matters
  const json& best = summary["best_eval"];
  EXPECT_GT(best["pearson"].get<double>(), 0.8) << best.dump();
  EXPECT_LT(best["mse"].get<double>(), 1.0) << best.dump();
}

TEST_F(ScoresCli, MultiLabelTrainsOneSigmoidPerLabelWithPerLabelThresholds) {
  // Labels from the second text: "good" / "bad" as it starts, "alone" when it has no other word
  // (a row may have two labels).
  const auto labels_of = [](const json& row) {
    json out = json::array();
    const std::string pair = row["text_pair"];
    if (pair.rfind("good", 0) == 0) out.push_back("good");
    if (pair.rfind("bad", 0) == 0) out.push_back("bad");
    if (pair.find(' ') == std::string::npos) out.push_back("alone");
    return out;
  };
  for (const std::string name : {"train.jsonl", "val.jsonl"}) {
    write_pair_task(path(name) + ".src", name == "train.jsonl" ? 384 : 96, name.size());
    std::ifstream in(path(name) + ".src");
    std::ofstream out(path(name));
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      j["label"] = labels_of(j);
      out << j.dump() << "\n";
    }
  }
  const std::string model = path("ml");
  write_tiny_bert(model, 2);
  const CliResult r = run_ftune("train --config " + config(model, "  loss: multi_label_bce\n") +
                                " training.epochs=4 training.learning_rate=1.0e-2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("multi-label, 3 labels"), std::string::npos) << r.output;
  const json summary = read_json_at(path("run/summary.json"));
  EXPECT_EQ(summary["labels"], json::array({"alone", "bad", "good"}));
  const json& best = summary["best_eval"];
  EXPECT_GT(best["macro_roc_auc"].get<double>(), 0.85) << best.dump();
  ASSERT_EQ(best["at_threshold"]["per_label"].size(), 3u);
  const json cfg = read_json_at(path("run/model/config.json"));
  EXPECT_EQ(cfg["problem_type"], "multi_label_classification");
  EXPECT_EQ(cfg["id2label"], (json{{"0", "alone"}, {"1", "bad"}, {"2", "good"}}));
  const json thresholds = read_json_at(path("run/model/decision_threshold.json"));
  EXPECT_EQ(thresholds["margins"], best["at_threshold"]["margins"]);
  if (const char* out = std::getenv("FTUNE_SCORES_OUT"))
    fs::copy(path("run/model"), std::string(out) + "/multi_label",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);

  const CliResult p = run_ftune("predict --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("pred.jsonl"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::vector<json> preds = read_lines(path("pred.jsonl"));
  const std::vector<double> margins = thresholds["margins"].get<std::vector<double>>();
  for (const json& row : preds) {
    ASSERT_EQ(row["probabilities"].size(), 3u);
    json want = json::array();
    for (int c = 0; c < 3; ++c)
      if (row["logits"][c].get<double>() > margins[c])
        want.push_back(cfg["id2label"][std::to_string(c)]);
    EXPECT_EQ(row["labels"], want);
  }
  const CliResult rep = run_ftune("report " + path("run") + " --output " + path("r.html"));
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  std::ifstream html(path("r.html"));
  const std::string page((std::istreambuf_iterator<char>(html)), {});
  EXPECT_NE(page.find("<th>micro_f1</th>"), std::string::npos);
  const CliResult e = run_ftune("eval --model " + path("run/model") + " --data " +
                                path("val.jsonl") + " --output " + path("eval.json"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const json ev = read_json_at(path("eval.json"));
  EXPECT_NEAR(ev["macro_roc_auc"].get<double>(), best["macro_roc_auc"].get<double>(), 1e-9);
  EXPECT_NEAR(ev["at_threshold"]["micro_f1"].get<double>(),
              best["at_threshold"]["micro_f1"].get<double>(), 1e-9);
}

TEST_F(ScoresCli, BadTargetsAndCombinationsAreRefused) {
  const std::string model = path("one");
  write_tiny_bert(model, 1);
  write_score_task(path("train.jsonl"), 16, 1, [](int good, int) { return json(good); });
  write_score_task(path("val.jsonl"), 8, 2, [](int good, int) { return json(good); });
  std::ofstream(path("train.jsonl"), std::ios::app)
      << R"({"text": "a", "text_pair": "good", "label": 1.5})"
      << "\n"
      << R"({"text": "a", "text_pair": "good", "label": "high"})"
      << "\n";
  CliResult r = run_ftune("train --config " + config(model));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path("train.jsonl") + ":17: target 1.5 is outside [0, 1]"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(path("train.jsonl") + ":18: score 'high' is not a number"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(path("run/model")));
  r = run_ftune("train --config " + config(model, "  label_smoothing: 0.1\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'training.label_smoothing' applies to cross_entropy only"),
            std::string::npos)
      << r.output;
  r = run_ftune("train --config " + config(model, "  loss: hinge\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.loss"), std::string::npos) << r.output;
  write_score_task(path("train.jsonl"), 16, 1, [](int good, int) { return json(good); });
  r = run_ftune("train --config " + config(model, "", "eval:\n  metric: pearson\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'eval.metric': pearson is a regression metric"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ftune::test
