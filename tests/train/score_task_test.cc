// The pieces of score tasks below the CLI: RegressionMetrics against scipy on a fixture with ties,
// training.loss resolved against the checkpoint's head (train/score_task.h) with its errors, the
// direction of each eval.metric, and the evaluation read-back of one-score models (binary metrics
// on s = the logit; regression pairs).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "models/hf_checkpoint.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/eval_readback.h"
#include "train/multilabel_metrics.h"
#include "train/presets.h"
#include "train/regression_metrics.h"
#include "train/score_task.h"

namespace ftune {
namespace {

using test::TempDir;

TEST(RegressionMetrics, MatchScipyWithTies) {
  // scipy 1.17.1: pearsonr(x, y) 0.8929094780474817, spearmanr(x, y) 0.9003508474033377 (ties
  // share their average rank: rankdata(x) = [3, 4.5, 4.5, 6.5, 9, 9, 9, 1, 2, 6.5]); numpy:
  // mean((x - y)^2) 0.625, mean(|x - y|) 0.65.
  const std::vector<float> x{0.5f, 1.0f, 1.0f, 2.0f, 3.5f, 3.5f, 3.5f, -1.0f, 0.0f, 2.0f};
  const std::vector<float> y{1.0f, 2.0f, 1.5f, 2.0f, 4.0f, 3.0f, 5.0f, 0.0f, 0.0f, 1.0f};
  RegressionMetrics m;
  m.add_batch(x.data(), y.data(), 4);  // streamed in two chunks
  RegressionMetrics rest;
  rest.add_batch(x.data() + 4, y.data() + 4, 6);
  m.merge(rest);
  EXPECT_NEAR(m.pearson(), 0.8929094780474817, 1e-12);
  EXPECT_NEAR(m.spearman(), 0.9003508474033377, 1e-12);
  EXPECT_NEAR(m.mse(), 0.625, 1e-12);
  EXPECT_NEAR(m.mae(), 0.65, 1e-12);
  const std::vector<double> ranks = average_ranks(x);
  const std::vector<double> want{3, 4.5, 4.5, 6.5, 9, 9, 9, 1, 2, 6.5};
  EXPECT_EQ(ranks, want);
  const nlohmann::json j = m.to_json();
  EXPECT_EQ(j["rows"], 10);
  EXPECT_TRUE(j["loss"].is_null());  // no loss added
  EXPECT_NEAR(j["rmse"].get<double>(), std::sqrt(0.625), 1e-12);
}

TEST(RegressionMetrics, ConstantSeriesHasNoCorrelation) {
  RegressionMetrics m;
  for (int i = 0; i < 5; ++i) m.add(1.0f, float(i));
  EXPECT_TRUE(std::isnan(m.pearson()));
  EXPECT_TRUE(std::isnan(m.spearman()));
  EXPECT_TRUE(m.to_json()["pearson"].is_null());
}

TEST(MultiLabelMetrics, MatchSklearnAndChooseEachLabelsThreshold) {
  // sklearn 1.9.1 on these scores (logits) and targets: roc_auc_score per label [1, 0.8889,
  // 0.8889] (label 2 has tied scores: ties count half); at logit 0 (probability 0.5)
  // f1_score micro 0.9, macro 0.9047619047619048, per label [1, 0.857142857, 0.857142857];
  // subset accuracy 4/6.
  const std::vector<float> s{2.0f,  -1.0f, 0.5f, -0.5f, 1.5f, 0.5f, 1.0f,  1.0f, -2.0f,
                             -2.0f, -1.0f, 0.5f, 0.3f,  2.0f, 1.0f, -1.0f, 0.2f, -0.1f};
  const std::vector<float> y{1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0};
  MultiLabelMetrics m({"a", "b", "c"});
  for (int r = 0; r < 6; ++r) m.add(s.data() + 3 * r, y.data() + 3 * r);
  m.add_loss(1.2, 6);
  EXPECT_DOUBLE_EQ(m.roc_auc(0), 1.0);
  EXPECT_NEAR(m.roc_auc(1), 0.888888888888889, 1e-12);
  EXPECT_NEAR(m.roc_auc(2), 0.888888888888889, 1e-12);
  const nlohmann::json j = m.to_json({0, 0, 0});
  EXPECT_NEAR(j["micro_f1"].get<double>(), 0.9, 1e-12);
  EXPECT_NEAR(j["macro_f1"].get<double>(), 0.9047619047619048, 1e-12);
  EXPECT_NEAR(j["subset_accuracy"].get<double>(), 4.0 / 6.0, 1e-12);
  EXPECT_NEAR(j["per_label"][1]["f1"].get<double>(), 6.0 / 7.0, 1e-12);
  EXPECT_NEAR(j["loss"].get<double>(), 0.2, 1e-12);
  // Each label's F1-best threshold, midway between the scores on either side of it: label 0
  // separates perfectly between 0.3 and -0.5; labels 1 and 2 reach 6/7 between 0.2 and -1 and
  // between 0.5 and -0.1.
  const std::vector<double> t = m.best_thresholds();
  EXPECT_NEAR(t[0], -0.1, 1e-6);
  EXPECT_NEAR(t[1], -0.4, 1e-6);
  EXPECT_NEAR(t[2], 0.2, 1e-6);
  const nlohmann::json at = m.to_json_with(t)["at_threshold"];
  EXPECT_NEAR(at["per_label"][0]["f1"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(at["macro_f1"].get<double>(), (1.0 + 12.0 / 7.0) / 3.0, 1e-12);
  EXPECT_NEAR(at["thresholds"][0].get<double>(), 1.0 / (1.0 + std::exp(0.1)), 1e-6);
}

TrainConfig config_for(const std::string& model, const std::string& loss) {
  TrainConfig c;
  c.model.path = model;
  c.training.loss = parse_choice<LossSetting>(loss, "training.loss");
  return c;
}

void write_config_field(const std::string& dir, const std::string& key, const nlohmann::json& v) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  j[key] = v;
  std::ofstream(dir + "/config.json") << j.dump(2);
}

TEST(ScoreTask, AutoFollowsTheCheckpointsHead) {
  TempDir tmp;
  const std::string two = tmp.path() + "/two", one = tmp.path() + "/one", reg = tmp.path() + "/reg";
  test::write_tiny_bert(two, 2, 64);
  test::write_tiny_bert(one, 1, 64);
  test::write_tiny_bert(reg, 1, 64);
  write_config_field(reg, "problem_type", "regression");

  ScoreTask t = resolve_score_task(config_for(two, "auto"), load_model_spec(two));
  EXPECT_EQ(t.loss, LossKind::CrossEntropy);
  EXPECT_FALSE(t.scores());
  t = resolve_score_task(config_for(one, "auto"), load_model_spec(one));
  EXPECT_EQ(t.loss, LossKind::Bce);
  EXPECT_EQ(t.score_labels, std::vector<std::string>{"LABEL_0"});
  EXPECT_EQ(t.targets(), data::ScoreTargets::kUnitScores);
  EXPECT_TRUE(t.set_problem_type);
  EXPECT_EQ(t.problem_type, "");
  t = resolve_score_task(config_for(reg, "auto"), load_model_spec(reg));
  EXPECT_EQ(t.loss, LossKind::Mse);
  EXPECT_EQ(t.problem_type, "regression");
  EXPECT_EQ(t.targets(), data::ScoreTargets::kScores);
  // A score loss on a two-label checkpoint: one score (a new head), named LABEL_0.
  t = resolve_score_task(config_for(two, "bce"), load_model_spec(two));
  EXPECT_EQ(t.score_labels, std::vector<std::string>{"LABEL_0"});
  // distill_mse reads data.teacher_field.
  TrainConfig d = config_for(one, "distill_mse");
  d.data.teacher_field = "teacher";
  t = resolve_score_task(d, load_model_spec(one));
  EXPECT_TRUE(t.distill);
  EXPECT_EQ(t.loss, LossKind::Mse);
  EXPECT_EQ(t.target_field(d), "teacher");
  // cross_entropy on a one-score checkpoint: labels from the data (a new head).
  EXPECT_EQ(resolve_score_task(config_for(one, "cross_entropy"), load_model_spec(one)).loss,
            LossKind::CrossEntropy);
}

TEST(ScoreTask, CombinationsThatCannotTrainNameTheKey) {
  TempDir tmp;
  const std::string one = tmp.path() + "/one";
  test::write_tiny_bert(one, 1, 64);
  TrainConfig c = config_for(one, "bce");
  c.training.label_smoothing = 0.1;
  try {
    resolve_score_task(c, load_model_spec(one));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'training.label_smoothing'"), std::string::npos);
  }
  c = config_for(one, "auto");
  c.training.class_weights = {1.0};
  try {
    resolve_score_task(c, load_model_spec(one));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'training.class_weights'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("training.loss auto: bce"), std::string::npos);
  }
  c = config_for(one, "mse");
  c.model.labels = {"a", "b"};
  EXPECT_THROW(resolve_score_task(c, load_model_spec(one)), InputError);
}

TEST(ScoreTask, MultiLabelFromTheCheckpointOrTheKey) {
  TempDir tmp;
  const std::string ml = tmp.path() + "/ml";
  test::write_tiny_bert(ml, 3, 64);
  write_config_field(ml, "problem_type", "multi_label_classification");
  ScoreTask t = resolve_score_task(config_for(ml, "auto"), load_model_spec(ml));
  EXPECT_TRUE(t.multi_label);
  EXPECT_EQ(t.loss, LossKind::Bce);
  EXPECT_FALSE(t.binary_score());
  EXPECT_EQ(t.targets(), data::ScoreTargets::kLabelLists);
  EXPECT_EQ(t.score_labels, (std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2"}));
  EXPECT_EQ(t.problem_type, "multi_label_classification");
  EXPECT_EQ(resolve_eval_metric("auto", t, 3), "macro_f1");
  EXPECT_EQ(resolve_eval_metric("micro_f1", t, 3), "micro_f1");
  EXPECT_THROW(resolve_eval_metric("accuracy", t, 3), InputError);
  // Asked for on a plain checkpoint: labels from model.labels, else from the data.
  const std::string two = tmp.path() + "/two";
  test::write_tiny_bert(two, 2, 64);
  TrainConfig c = config_for(two, "multi_label_bce");
  EXPECT_TRUE(resolve_score_task(c, load_model_spec(two)).score_labels.empty());
  c.model.labels = {"x", "y", "z", "w"};
  EXPECT_EQ(resolve_score_task(c, load_model_spec(two)).score_labels.size(), 4u);
  EXPECT_THROW(resolve_eval_metric("micro_f1", ScoreTask{}, 3), InputError);
}

// auto: listwise on query groups, bce otherwise (the one-score head kept either way).
TEST(ScoreTask, BgeRerankerPresetTrainsItsOneLogitHeadListwiseOnGroupsElseBce) {
  EXPECT_EQ(preset_defaults("bge-reranker", "test")["training"]["loss"].as<std::string>(), "auto");
}

TEST(ScoreTask, GroupLossesOnAOneScoreCheckpointKeepItsHead) {
  TempDir tmp;
  const std::string two = tmp.path() + "/two", one = tmp.path() + "/one";
  test::write_tiny_bert(two, 2, 64);
  test::write_tiny_bert(one, 1, 64);
  // auto with query groups on a one-score checkpoint: listwise on its one logit, config as shipped.
  ScoreTask t = resolve_score_task(config_for(one, "auto"), load_model_spec(one), true);
  EXPECT_EQ(t.loss_name, "listwise");
  EXPECT_EQ(t.loss, LossKind::Bce);
  EXPECT_TRUE(t.group_loss && t.grouped() && t.binary_score());
  EXPECT_EQ(t.targets(), data::ScoreTargets::kUnitScores);
  EXPECT_FALSE(t.set_problem_type);
  EXPECT_EQ(t.score_labels, std::vector<std::string>{"LABEL_0"});
  t = resolve_score_task(config_for(one, "listwise"), load_model_spec(one));
  EXPECT_TRUE(t.group_loss);
  // auto with groups on a 2-label checkpoint stays cross_entropy; listwise there is the 2-logit
  // classifier's (class labels).
  EXPECT_EQ(resolve_score_task(config_for(two, "auto"), load_model_spec(two), true).loss_name,
            "cross_entropy");
  t = resolve_score_task(config_for(two, "listwise"), load_model_spec(two));
  EXPECT_FALSE(t.scores());
  EXPECT_TRUE(t.grouped());
  // margin_mse: teacher scores (kScores) from data.teacher_field, one score, head kept.
  TrainConfig m = config_for(one, "margin_mse");
  m.data.teacher_field = "teacher";
  t = resolve_score_task(m, load_model_spec(one));
  EXPECT_TRUE(t.distill && t.group_loss && t.grouped());
  EXPECT_EQ(t.loss, LossKind::Mse);
  EXPECT_EQ(t.targets(), data::ScoreTargets::kScores);
  EXPECT_EQ(t.target_field(m), "teacher");
  EXPECT_FALSE(t.set_problem_type);
  EXPECT_EQ(resolve_eval_metric("auto", t, 1), "mse");
}

TEST(ScoreTask, EvalMetricsAndTheirDirection) {
  ScoreTask reg;
  reg.loss = LossKind::Mse;
  reg.loss_name = "mse";
  ScoreTask bce;
  bce.loss = LossKind::Bce;
  bce.loss_name = "bce";
  const ScoreTask ce;
  EXPECT_EQ(resolve_eval_metric("auto", reg, 1), "pearson");
  ScoreTask distill = reg;
  distill.distill = true;
  EXPECT_EQ(resolve_eval_metric("auto", distill, 1), "mse");
  EXPECT_EQ(resolve_eval_metric("auto", bce, 1), "macro_f1");
  EXPECT_EQ(resolve_eval_metric("roc_auc", bce, 1), "roc_auc");  // one score is binary
  EXPECT_EQ(resolve_eval_metric("spearman", reg, 1), "spearman");
  EXPECT_THROW(resolve_eval_metric("accuracy", reg, 1), InputError);
  EXPECT_THROW(resolve_eval_metric("pearson", ce, 2), InputError);
  EXPECT_THROW(resolve_eval_metric("roc_auc", ce, 3), InputError);
  for (const char* lower : {"loss", "mse", "mae"}) EXPECT_FALSE(metric_maximized(lower)) << lower;
  for (const char* higher : {"pearson", "spearman", "macro_f1", "roc_auc", "accuracy"})
    EXPECT_TRUE(metric_maximized(higher)) << higher;
}

TEST(ScoreReadback, OneScoreIsBinaryOnTheLogitOrRegressionPairs) {
  // Three rows of one score: s = 2, -1, 0.5 with targets 1, 0, 0.7 (>= 0.5: positive).
  const std::vector<float> scores{2.0f, -1.0f, 0.5f}, loss{0.25f};
  const TensorView logits(const_cast<float*>(scores.data()), DType::F32, Device::cpu(),
                          Shape{3, 1});
  const TensorView l(const_cast<float*>(loss.data()), DType::F32, Device::cpu(), Shape{1});
  EvalReadback rb(Device::cpu(), 4, 1);
  ClassificationMetrics m(2, EvalSplit::Validation);
  rb.push(logits, l, {0, 0, 0}, {1.0f, 0.0f, 0.7f});
  EXPECT_EQ(rb.pop(m), 3);
  EXPECT_EQ(m.count(), 3);
  EXPECT_EQ(m.confusion(), (std::vector<int64_t>{1, 0, 0, 2}));  // s > 0 is class 1
  EXPECT_DOUBLE_EQ(m.roc_auc(), 1.0);
  EXPECT_NEAR(m.mean_loss(), 0.25, 1e-7);
  RegressionMetrics r;
  rb.push(logits, l, {0, 0, 0}, {1.0f, 0.0f, 0.7f});
  EXPECT_EQ(rb.pop(m, &r), 3);
  EXPECT_EQ(r.predictions(), scores);
  EXPECT_EQ(r.targets(), (std::vector<float>{1.0f, 0.0f, 0.7f}));
  EXPECT_NEAR(r.mean_loss(), 0.25, 1e-7);
}

}  // namespace
}  // namespace ftune
