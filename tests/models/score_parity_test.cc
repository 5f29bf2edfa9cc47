// Single-score and multi-label heads against transformers + PyTorch on golden fixtures
// (tools/make_score_fixtures.py): a one-logit BERT cross-encoder and a one-logit XLM-R head (as
// BGE rerankers ship) trained with BCE on soft / 0-1 targets, a regression head with MSE, and a
// multi-label head with BCE over every label. Each loads with its head intact (no parameter
// initialised, num_labels and problem_type as saved), gives transformers' logits, loss and every
// gradient, and follows PyTorch over three AdamW steps with clipping and a schedule; saving it
// again writes what transformers wrote. Query-group losses on the one-logit heads
// (tools/make_group_score_fixtures.py): FlagEmbedding's listwise softmax and
// sentence-transformers' MarginMSE, two groups of 3 rows. Tolerance: max relative error 1e-4 per
// tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/adapter_config.h"
#include "models/hf_checkpoint.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

namespace ftune::test {
namespace {

constexpr double kScoreTol = 1e-4;

struct ScoreModel {
  std::unique_ptr<SequenceClassifier> model;
  std::unique_ptr<AdamW> adamw;
  Arena arena;
  LoadReport report;
};

ScoreModel load_score_model_from(const std::string& model_dir, const Batch& batch,
                                 const AdamWOptions& adam = {}) {
  ScoreModel l;
  l.model = std::make_unique<SequenceClassifier>(
      load_model_spec(model_dir), ClassifierOptions{batch.size, batch.seq_len, true});
  ArenaPlan plan;
  l.model->add_to_plan(plan);
  l.adamw = std::make_unique<AdamW>(l.model->params(), adam);
  l.adamw->add_to_plan(plan);
  l.arena = Arena(Device::cpu(), std::move(plan));
  l.model->bind(l.arena);
  l.adamw->bind(l.arena);
  l.report = load_model_weights(*l.model, model_dir);
  return l;
}

ScoreModel load_score_model(const GoldenCase& c, const AdamWOptions& adam = {}) {
  return load_score_model_from(c.model_dir, c.batch, adam);
}

// bce | mse, or a loss over query groups of loss.group_size rows (tools/make_group_score_fixtures.py):
// listwise (FlagEmbedding's group softmax on the one logit, targets = relevance) or margin_mse
// (sentence-transformers' MarginMSELoss, targets = teacher scores).
LossOptions score_loss(const GoldenCase& c) {
  LossOptions o;
  const std::string kind = c.meta["loss"]["kind"].get<std::string>();
  o.kind = kind == "bce" || kind == "listwise" ? LossKind::Bce : LossKind::Mse;
  if (kind == "listwise" || kind == "margin_mse") {
    o.listwise_group_size = c.meta["loss"]["group_size"].get<int64_t>();
    o.margin_mse = kind == "margin_mse";
  }
  return o;
}

std::set<std::string> zero_grad_names(const GoldenCase& c) {
  std::set<std::string> out;
  for (const auto& n : c.meta["analytically_zero_grads"]["names"]) out.insert(n.get<std::string>());
  return out;
}

class ScoreParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ScoreParity, HeadKeptAsShipped) {
  const GoldenCase c = GoldenCase::load(GetParam());
  const ModelSpec spec = load_model_spec(c.model_dir);
  EXPECT_EQ(spec.num_labels(), c.meta["num_labels"].get<int64_t>());
  const auto& saved = c.meta["saved_config_labels"];
  EXPECT_EQ(spec.problem_type(),
            saved["problem_type"].is_null() ? "" : saved["problem_type"].get<std::string>());
  ScoreModel l = load_score_model(c);
  EXPECT_TRUE(l.report.initialised.empty()) << "the shipped head must be loaded, not made anew";
  EXPECT_EQ(c.batch.targets.size(), static_cast<size_t>(c.batch.size * spec.num_labels()));
}

TEST_P(ScoreParity, LogitsLossAndEveryGradient) {
  const GoldenCase c = GoldenCase::load(GetParam());
  ScoreModel l = load_score_model(c);
  l.model->set_batch(c.batch);
  const TensorView logits = l.model->forward(DropoutPlan{true, 0, 0});
  EXPECT_LT(max_rel_error(logits, c.tensor("logits").view()), kScoreTol);
  const TensorView loss = l.model->loss(score_loss(c));
  EXPECT_LT(max_rel_error(loss, c.tensor("loss").view()), kScoreTol);
  l.model->backward(DropoutPlan{true, 0, 0});
  const std::set<std::string> zero = zero_grad_names(c);
  double worst = 0;
  for (const ParamSpec& p : l.model->params().specs()) {
    if (zero.count(p.name)) {
      for (float g : to_vector(l.model->grad(p.name))) EXPECT_LE(std::fabs(g), 1e-6) << p.name;
      continue;
    }
    const double err = max_rel_error(l.model->grad(p.name), c.tensor("grad." + p.name).view());
    EXPECT_LT(err, kScoreTol) << p.name;
    worst = std::max(worst, err);
  }
  std::printf("%s: logits %.2e, loss %.2e, worst gradient %.2e\n", GetParam().c_str(),
              max_rel_error(logits, c.tensor("logits").view()),
              max_rel_error(loss, c.tensor("loss").view()), worst);
}

TEST_P(ScoreParity, ThreeAdamWStepsWithClippingAndSchedule) {
  const GoldenCase c = GoldenCase::load(GetParam());
  AdamWOptions adam = fixture_adamw(c.meta["optimizer"]);
  ScoreModel l = load_score_model(c, adam);
  const auto& sched = c.meta["schedule"];
  LrSchedule schedule{parse_schedule_kind(sched["type"].get<std::string>(), "schedule.type"),
                      adam.lr, sched["warmup_steps"].get<int64_t>(),
                      sched["total_steps"].get<int64_t>()};
  const auto losses = to_vector(c.tensor("losses").view());
  const auto norms = to_vector(c.tensor("grad_norms").view());
  const double max_norm = c.meta["max_grad_norm"].get<double>();
  // Where the generator measured how far PyTorch's own fp32 run sits from its float64 run
  // (tools/make_group_score_fixtures.py: the first AdamW step is about lr * sign(g), so rounding
  // can flip a step), the step losses and norms are held to twice that spread when it is larger.
  const double spread =
      c.meta.contains("float64_reference")
          ? c.meta["float64_reference"]["max_rel_diff_of_pytorch_fp32"].get<double>()
          : 0.0;
  const double step_tol = std::max(kScoreTol, 2 * spread);
  l.model->set_batch(c.batch);
  for (int step = 0; step < c.meta["steps"].get<int>(); ++step) {
    l.model->zero_grad();
    l.model->forward(DropoutPlan{true, 0, 0});
    const float loss = to_vector(l.model->loss(score_loss(c)))[0];
    EXPECT_NEAR(loss, losses[step], step_tol * std::fabs(losses[step])) << "step " << step;
    l.model->backward(DropoutPlan{true, 0, 0});
    const double norm = clip_grad_norm(l.model->param_grads(), max_norm);
    EXPECT_NEAR(norm, norms[step], step_tol * norms[step]) << "step " << step;
    std::printf("%s step %d: loss %.7g (PyTorch %.7g), grad norm %.7g (PyTorch %.7g)\n",
                GetParam().c_str(), step, loss, losses[step], norm, norms[step]);
    l.adamw->step(l.model->param_values(), l.model->param_grads(),
                  static_cast<float>(schedule.lr(step)));
  }
  double lr_sum = 0, worst = 0;
  for (float lr : to_vector(c.tensor("lrs").view())) lr_sum += lr;
  const std::set<std::string> zero = zero_grad_names(c);
  for (const ParamSpec& p : l.model->params().specs()) {
    const HostTensor want = c.tensor("step3." + p.name);
    if (zero.count(p.name)) {
      const auto got = to_vector(l.model->param(p.name)), w = to_vector(want.view());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], w[i], 2 * lr_sum) << p.name;
      continue;
    }
    const AdamComparison cmp = compare_after_adam(
        l.model->param(p.name), want.view(), c.tensor("grad." + p.name).view(), 2 * lr_sum, p.name);
    EXPECT_LT(cmp.rel_error, kScoreTol) << p.name;
    worst = std::max(worst, cmp.rel_error);
  }
  std::printf("%s: worst parameter after 3 AdamW steps %.2e\n", GetParam().c_str(), worst);
}

TEST_P(ScoreParity, SavedConfigCarriesLabelsAndProblemTypeAsTransformersWrites) {
  const GoldenCase c = GoldenCase::load(GetParam());
  ScoreModel l = load_score_model(c);
  const TempDir tmp;
  const std::string out = tmp.path() + "/model";
  save_model(*l.model, out);
  const nlohmann::json j = io::read_json_file(out + "/config.json");
  const auto& saved = c.meta["saved_config_labels"];
  EXPECT_EQ(j["id2label"], saved["id2label"]);
  EXPECT_EQ(j["label2id"], saved["label2id"]);
  // transformers 5 writes no num_labels (id2label carries it); neither does ftune.
  EXPECT_FALSE(j.contains("num_labels"));
  if (saved["problem_type"].is_null())
    EXPECT_FALSE(j.contains("problem_type"));
  else
    EXPECT_EQ(j["problem_type"], saved["problem_type"]);
  // A problem_type chosen by training replaces the checkpoint's, and "" removes it.
  SequenceClassifier regression(load_model_spec(c.model_dir).with_problem_type("regression"),
                                ClassifierOptions{1, 8, false});
  EXPECT_EQ(regression.spec().to_json()["problem_type"], "regression");
  EXPECT_FALSE(
      load_model_spec(c.model_dir).with_problem_type("").to_json().contains("problem_type"));
}

// After three AdamW steps, the saved model loads back as a one-score model (num_labels 1, the
// shipped labels) with no parameter initialised, and gives the trained model's logits.
TEST_P(ScoreParity, TrainedModelSavesAndLoadsBackWithItsLogits) {
  const GoldenCase c = GoldenCase::load(GetParam());
  ScoreModel l = load_score_model(c);
  l.model->set_batch(c.batch);
  for (int step = 0; step < 3; ++step) {
    l.model->zero_grad();
    l.model->forward(DropoutPlan{true, 0, 0});
    l.model->loss(score_loss(c));
    l.model->backward(DropoutPlan{true, 0, 0});
    l.adamw->step(l.model->param_values(), l.model->param_grads(), 1e-3f);
  }
  const std::vector<float> trained = to_vector(l.model->forward(DropoutPlan{true, 0, 0}));
  const TempDir tmp;
  const std::string out = tmp.path() + "/model";
  save_model(*l.model, out);
  const ModelSpec spec = load_model_spec(out);
  EXPECT_EQ(spec.num_labels(), load_model_spec(c.model_dir).num_labels());
  EXPECT_EQ(spec.info().id2label, load_model_spec(c.model_dir).info().id2label);
  ScoreModel back = load_score_model_from(out, c.batch);
  EXPECT_TRUE(back.report.initialised.empty());
  back.model->set_batch(c.batch);
  const std::vector<float> again = to_vector(back.model->forward(DropoutPlan{true, 0, 0}));
  ASSERT_EQ(again.size(), trained.size());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i], trained[i]) << "row " << i;
}

INSTANTIATE_TEST_SUITE_P(Heads, ScoreParity,
                         ::testing::Values("bert_score_bce", "xlmr_score_bce",
                                           "bert_regression_mse", "roberta_multilabel_bce",
                                           "bert_score_listwise", "xlmr_score_listwise",
                                           "bert_score_margin_mse", "xlmr_score_margin_mse"));

// Every family reads a one-label config as a one-score model, and trains the score with BCE and
// MSE (full fine-tuning, and LoRA / DoRA for the decoders, whose head trains whole): the shapes,
// a finite loss and a gradient on the head. The checkpoints are the engine fixtures of each
// family, their config rewritten to one label (the head then made anew, as HF's
// ignore_mismatched_sizes).
class OneScoreFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(OneScoreFamily, OneLabelConfigIsAOneScoreModelForEveryFamily) {
  const GoldenCase c = GoldenCase::load(GetParam());
  nlohmann::json cfg = io::read_json_file(c.model_dir + "/config.json");
  cfg["id2label"] = {{"0", "LABEL_0"}};
  cfg["label2id"] = {{"LABEL_0", 0}};
  cfg.erase("num_labels");
  const ModelSpec spec = model_spec_from_json(cfg, c.model_dir + "/config.json");
  ASSERT_EQ(spec.num_labels(), 1);
  const bool decoder = c.meta.value("model_type", "").find("bert") == std::string::npos;
  for (const PeftMethod method : {PeftMethod::None, PeftMethod::Lora, PeftMethod::Dora}) {
    if (method != PeftMethod::None && !decoder) continue;
    SCOPED_TRACE(peft_method_name(method));
    ClassifierOptions o{c.batch.size, c.batch.seq_len, true};
    if (method != PeftMethod::None) {
      o.adapters.method = method;
      o.adapters.target_modules = {"q_proj", "v_proj"};
      o.adapters.modules_to_save = {"score"};
    }
    SequenceClassifier model(spec, o);
    ArenaPlan plan;
    model.add_to_plan(plan);
    Arena arena(Device::cpu(), std::move(plan));
    model.bind(arena);
    LoadOptions lo;
    lo.reinit_mismatched_head = true;
    load_model_weights(model, c.model_dir, lo);
    if (model.adapters_on()) model.init_adapters(7);
    Batch b = c.batch;
    b.labels.assign(static_cast<size_t>(b.size),
                    0);  // every row counts (the fixture's are classes)
    b.targets = {1.0f, 0.0f, 0.25f, 0.75f};
    b.targets.resize(static_cast<size_t>(b.size), 0.5f);
    model.set_batch(b);
    for (const LossKind kind : {LossKind::Bce, LossKind::Mse}) {
      model.zero_grad();
      const TensorView logits = model.forward(DropoutPlan{true, 0, 0});
      EXPECT_EQ(logits.shape, (Shape{b.size, 1}));
      LossOptions lopt;
      lopt.kind = kind;
      const float loss = to_vector(model.loss(lopt))[0];
      EXPECT_TRUE(std::isfinite(loss)) << loss_kind_name(kind);
      model.backward(DropoutPlan{true, 0, 0});
      double g = 0;
      for (float v : to_vector(model.trainable_grads())) g += std::fabs(v);
      EXPECT_GT(g, 0.0) << loss_kind_name(kind);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, OneScoreFamily,
                         ::testing::Values("bert_pair", "roberta_pair", "deberta_v3_pair",
                                           "modernbert_cls", "llama_pair", "gemma2_pair"));

}  // namespace
}  // namespace ftune::test
