// End-to-end parity with Hugging Face transformers on golden fixtures
// (tools/make_engine_fixtures.py): logits, encoder output, loss and every parameter gradient of
// BERT, RoBERTa, XLM-R and DeBERTa-v2/v3 classifiers on a padded text-pair batch (class weights and label
// smoothing on), then three AdamW steps with clipping and an LR schedule. Tolerance: max relative
// error 1e-4 per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "golden_fixture.h"
#include "models/hf_checkpoint.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

namespace ftune::test {
namespace {

constexpr double kTol = 1e-4;

struct Loaded {
  std::unique_ptr<SequenceClassifier> model;
  std::unique_ptr<AdamW> adamw;
  Arena arena;
  LoadReport report;
};

// first_token_head: the BERT family's last layer for the first tokens alone (models/bert/
// encoder.h), as training and scoring run it; off keeps every token's last hidden state.
Loaded load(const GoldenCase& c, bool training, const AdamWOptions& adam = {},
            const LoadOptions& lo = {}, bool first_token_head = false) {
  Loaded l;
  ClassifierOptions o{c.batch.size, c.batch.seq_len, training};
  o.first_token_head = first_token_head;
  l.model = std::make_unique<SequenceClassifier>(load_model_spec(c.model_dir, lo), o);
  ArenaPlan plan;
  l.model->add_to_plan(plan);
  if (training) {
    l.adamw = std::make_unique<AdamW>(l.model->params(), adam);
    l.adamw->add_to_plan(plan);
  }
  l.arena = Arena(Device::cpu(), std::move(plan));
  l.model->bind(l.arena);
  if (l.adamw) l.adamw->bind(l.arena);
  l.report = load_model_weights(*l.model, c.model_dir, lo);
  return l;
}

LossOptions loss_options(const GoldenCase& c) {
  LossOptions o;
  const auto& loss = c.meta["loss"];
  o.label_smoothing = loss["label_smoothing"].get<float>();
  if (!loss["class_weights"].is_null())
    o.class_weights = loss["class_weights"].get<std::vector<float>>();
  return o;
}

DropoutPlan no_dropout() {
  return DropoutPlan{true, 0, 0};
}  // the fixtures' configs have p = 0

// The encoder output's error: every position, or (case.json "hidden_rows": "real": DeBERTa, whose
// HF embeddings are multiplied by the mask) the real positions only.
double hidden_error(const GoldenCase& c, TensorView got) {
  const HostTensor want = c.tensor("hidden");
  if (c.meta.value("hidden_rows", "all") != "real") return max_rel_error(got, want.view());
  const std::vector<float> g = to_vector(got), w = to_vector(want.view());
  const int64_t C = static_cast<int64_t>(g.size()) / (c.batch.size * c.batch.seq_len);
  double scale = 1e-6, err = 0;
  for (int64_t n = 0; n < c.batch.size * c.batch.seq_len; ++n)
    for (int64_t i = n * C; i < (n + 1) * C && c.batch.attention_mask[n]; ++i) {
      scale = std::max(scale, std::fabs(double(w[i])));
      err = std::max(err, std::fabs(double(g[i]) - w[i]));
    }
  return err / scale;
}

// Both forms of the last layer: every token's (its hidden state compared too) and the first
// tokens' alone.
class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  void logits_loss_and_every_gradient(bool first_token_head);
};

TEST_P(HfParity, LogitsLossAndEveryGradient) {
  logits_loss_and_every_gradient(false);
}

// The families that have the first-token form (instantiated below; the others ignore the option).
class HfParityFirstTokenHead : public HfParity {};

TEST_P(HfParityFirstTokenHead, LogitsLossAndEveryGradient) {
  logits_loss_and_every_gradient(true);
}

void HfParity::logits_loss_and_every_gradient(bool first_token_head) {
  const GoldenCase c = GoldenCase::load(GetParam());
  Loaded l = load(c, true, {}, {}, first_token_head);
  EXPECT_TRUE(l.report.initialised.empty());
  l.model->set_batch(c.batch);
  const TensorView logits = l.model->forward(no_dropout());
  EXPECT_LT(max_rel_error(logits, c.tensor("logits").view()), kTol);
  if (!first_token_head) EXPECT_LT(hidden_error(c, l.model->hidden()), kTol);
  const TensorView loss = l.model->loss(loss_options(c));
  EXPECT_LT(max_rel_error(loss, c.tensor("loss").view()), kTol);
  l.model->backward(no_dropout());

  std::set<std::string> zero_grads;
  if (c.meta.contains("analytically_zero_grads"))
    for (const auto& n : c.meta["analytically_zero_grads"]["names"])
      zero_grads.insert(n.get<std::string>());
  int checked = 0;
  double worst_grad = 0;
  for (const ParamSpec& spec : l.model->params().specs()) {
    const HostTensor want = c.tensor("grad." + spec.name);
    if (zero_grads.count(spec.name)) {
      for (float g : to_vector(l.model->grad(spec.name)))
        EXPECT_LE(std::fabs(g), 1e-6) << spec.name;
    } else {
      const double err = max_rel_error(l.model->grad(spec.name), want.view());
      EXPECT_LT(err, kTol) << spec.name;
      worst_grad = std::max(worst_grad, err);
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(c.meta["param_names"].size()));
  std::printf("%s%s: max relative error logits %.2e, hidden %.2e, loss %.2e, worst of %d gradients %.2e\n",
              GetParam().c_str(), first_token_head ? " (first-token head)" : "",
              max_rel_error(logits, c.tensor("logits").view()),
              first_token_head ? 0.0 : hidden_error(c, l.model->hidden()),
              max_rel_error(loss, c.tensor("loss").view()), checked, worst_grad);
}

TEST_P(HfParity, ThreeAdamWStepsWithClippingAndSchedule) {
  const GoldenCase c = GoldenCase::load(GetParam());
  AdamWOptions adam = fixture_adamw(c.meta["optimizer"]);
  Loaded l = load(c, true, adam);
  // The decay split must be HF Trainer's.
  std::set<std::string> no_decay;
  for (const auto& n : c.meta["optimizer"]["no_decay"]) no_decay.insert(n.get<std::string>());
  for (const ParamSpec& spec : l.model->params().specs())
    EXPECT_EQ(spec.decay, !no_decay.count(spec.name)) << spec.name;

  const auto& sched = c.meta["schedule"];
  LrSchedule schedule{parse_schedule_kind(sched["type"].get<std::string>(), "schedule.type"),
                      adam.lr, sched["warmup_steps"].get<int64_t>(),
                      sched.value("total_steps", int64_t{1})};
  const auto losses = to_vector(c.tensor("losses").view());
  const auto norms = to_vector(c.tensor("grad_norms").view());
  const auto lrs = to_vector(c.tensor("lrs").view());
  const double max_norm = c.meta["max_grad_norm"].get<double>();
  l.model->set_batch(c.batch);
  for (int step = 0; step < c.meta["steps"].get<int>(); ++step) {
    l.model->zero_grad();
    l.model->forward(no_dropout());
    const float loss = to_vector(l.model->loss(loss_options(c)))[0];
    EXPECT_NEAR(loss, losses[step], kTol * std::fabs(losses[step])) << "step " << step;
    l.model->backward(no_dropout());
    const double norm = clip_grad_norm(l.model->param_grads(), max_norm);
    EXPECT_NEAR(norm, norms[step], kTol * norms[step]) << "step " << step;
    EXPECT_NEAR(schedule.lr(step), lrs[step], 1e-9) << "step " << step;
    l.adamw->step(l.model->param_values(), l.model->param_grads(),
                  static_cast<float>(schedule.lr(step)));
  }
  double lr_sum = 0, worst_param = 0;
  int noise_elements = 0;
  for (float lr : lrs) lr_sum += lr;
  std::set<std::string> zero_grads;
  if (c.meta.contains("analytically_zero_grads"))
    for (const auto& n : c.meta["analytically_zero_grads"]["names"])
      zero_grads.insert(n.get<std::string>());
  for (const ParamSpec& spec : l.model->params().specs()) {
    const HostTensor want = c.tensor("step3." + spec.name);
    if (zero_grads.count(spec.name)) {
      // Adam normalises round-off noise of an exactly-zero gradient into steps of up to lr.
      const auto got = to_vector(l.model->param(spec.name)), w = to_vector(want.view());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], w[i], 2 * lr_sum) << spec.name;
    } else {
      // Elements whose first gradient is fp32-noise-sized: within 2 sum(lr) (compare_after_adam).
      const AdamComparison cmp = compare_after_adam(
          l.model->param(spec.name), want.view(), c.tensor("grad." + spec.name).view(),
          2 * lr_sum, spec.name);
      EXPECT_LT(cmp.rel_error, kTol) << spec.name;
      worst_param = std::max(worst_param, cmp.rel_error);
      noise_elements += cmp.noise_elements;
    }
  }
  std::printf("%s: worst parameter after 3 AdamW steps: max relative error %.2e (%d elements with "
              "noise-sized first gradients)\n",
              GetParam().c_str(), worst_param, noise_elements);
}

INSTANTIATE_TEST_SUITE_P(Models, HfParity,
                         ::testing::Values("bert_pair", "roberta_pair", "xlmr_pair", "llama_pair",
                                           "qwen2_pair", "mistral_pair", "qwen3_pair", "gemma_pair", "gemma2_pair",
                                           "gemma3_pair", "gemma3_mm_pair",
                                           "deberta_v3_pair", "deberta_v2_pair"));

INSTANTIATE_TEST_SUITE_P(Families, HfParityFirstTokenHead,
                         ::testing::Values("bert_pair", "roberta_pair", "xlmr_pair",
                                           "deberta_v3_pair", "deberta_v2_pair"));

// ModernBERT (tools/make_modernbert_fixtures.py): cls and mean pooling, rows longer than the local
// window, with and without biases, legacy and transformers 5 config keys.
INSTANTIATE_TEST_SUITE_P(ModernBert, HfParity, ::testing::Values("modernbert_cls", "modernbert_mean"));

// Checkpoints stored in bf16 / f16, sharded, or as base encoders without a head.
class HfLoading : public ::testing::TestWithParam<std::string> {};

TEST_P(HfLoading, EncoderOutputMatchesAndHeadIsReportedAsHfDoes) {
  const GoldenCase c = GoldenCase::load(GetParam());
  Loaded l = load(c, false);
  l.model->set_batch(c.batch);
  const TensorView logits = l.model->forward(DropoutPlan{});
  EXPECT_LT(hidden_error(c, l.model->hidden()), kTol);
  if (c.expected.find("logits")) EXPECT_LT(max_rel_error(logits, c.tensor("logits").view()), kTol);

  std::vector<std::string> missing;
  if (c.meta.contains("missing_keys"))
    missing = c.meta["missing_keys"].get<std::vector<std::string>>();
  else if (c.meta.contains("as_BertForSequenceClassification"))
    missing =
        c.meta["as_BertForSequenceClassification"]["missing_keys"].get<std::vector<std::string>>();
  std::sort(missing.begin(), missing.end());
  std::vector<std::string> initialised = l.report.initialised;
  std::sort(initialised.begin(), initialised.end());
  EXPECT_EQ(initialised, missing);
  if (c.meta.contains("unexpected_keys"))
    for (const auto& u : c.meta["unexpected_keys"])
      EXPECT_NE(
          std::find(l.report.unexpected.begin(), l.report.unexpected.end(), u.get<std::string>()),
          l.report.unexpected.end())
          << u;
  // A fresh head is normal(0, initializer_range) with zero bias, as HF initialises it.
  for (const std::string& name : initialised) {
    const auto v = to_vector(l.model->param(name));
    double sq = 0;
    for (float x : v) sq += double(x) * x;
    const double std_dev = std::sqrt(sq / v.size());
    if (name.size() > 5 && name.substr(name.size() - 5) == ".bias")
      EXPECT_EQ(sq, 0.0) << name;
    else if (v.size() > 50)
      EXPECT_NEAR(std_dev, c.meta.contains("init") ? 0.2 : 0.02, 0.05) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, HfLoading,
                         ::testing::Values("bert_bf16", "bert_f16", "bert_sharded",
                                           "bert_base_encoder", "roberta_base_encoder",
                                           "bert_prefixless", "bert_mlm_tied"));

}  // namespace
}  // namespace ftune::test
