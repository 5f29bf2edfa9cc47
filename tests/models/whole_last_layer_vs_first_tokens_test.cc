// The first-token form of BERT's encoder and DeBERTa (ClassifierOptions::first_token_head,
// models/layers/first_token_rows.h: the last layer past attention for the rows' first tokens
// alone) computes what the whole last layer does for the head: with every dropout on (hidden, attention, classifier 0.1; LoRA dropout
// 0.1), over two accumulated micro-steps with different masks, for full fine-tuning, LoRA and DoRA,
// padded and packed, with and without gradient checkpointing, in fp32 and bf16 compute, the
// logits and every trainable gradient agree with the whole layer's within float rounding (fp32:
// 1e-5 of each tensor's largest value, the GEMMs over fewer rows may round differently; bf16: a
// 16-bit rounding). Its hidden() is the first tokens' rows of the whole layer's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "adapter_init.h"
#include "data/token_batch.h"
#include "golden_fixture.h"
#include "models/batch.h"
#include "models/hf_checkpoint.h"

namespace ftune::test {
namespace {

struct FirstTokenCase {
  const char* fixture = "bert_pair";  // tests/fixtures/engine: BERT, or DeBERTa-v3
  PeftMethod method = PeftMethod::None;
  bool packed = false;
  GradientCheckpointing ckpt = GradientCheckpointing::Off;
  DType compute = DType::F32;
};

std::string first_token_case_name(const FirstTokenCase& c) {
  return std::string(c.fixture) + "_" + peft_method_name(c.method) + (c.packed ? "_packed" : "_padded") +
         (c.ckpt == GradientCheckpointing::On ? "_checkpointing" : "") +
         (c.compute == DType::F32 ? "" : "_" + std::string(dtype_name(c.compute)));
}

struct FirstTokenModel {
  std::unique_ptr<SequenceClassifier> clf;
  Arena arena;
};

FirstTokenModel build_model(const GoldenCase& g, const FirstTokenCase& c, bool first_token_head) {
  const ModelSpec spec = load_model_spec(g.model_dir).with_dropout({0.1f, 0.1f, 0.1f});
  const bool deberta = std::string(c.fixture).rfind("deberta", 0) == 0;
  ClassifierOptions o;
  o.max_batch = g.batch.size;
  o.max_seq = g.batch.seq_len;
  o.packed = c.packed;
  o.max_tokens = g.batch.size * g.batch.seq_len;
  o.checkpointing = c.ckpt;
  o.compute = c.compute;
  o.first_token_head = first_token_head;
  o.adapters.method = c.method;
  o.adapters.r = 3;
  o.adapters.alpha = 5;
  o.adapters.dropout = c.method == PeftMethod::Lora ? 0.1 : 0.0;  // DoRA takes no adapter dropout
  o.adapters.target_modules = {deberta ? "query_proj" : "query", deberta ? "value_proj" : "value",
                               "intermediate.dense", "output.dense"};
  FirstTokenModel m;
  m.clf = std::make_unique<SequenceClassifier>(spec, o);
  ArenaPlan plan;
  m.clf->add_to_plan(plan);
  m.arena = Arena(Device::cpu(), std::move(plan));
  m.clf->bind(m.arena);
  load_model_weights(*m.clf, g.model_dir);
  if (c.method != PeftMethod::None) {
    m.clf->init_adapters(5);
    randomize_lora_b(*m.clf);
  }
  if (c.packed)
    m.clf->set_batch(layout_rows(g.batch, position_ids(m.clf->spec(), g.batch), 0, g.batch.size,
                                 BatchLayout::Packed));
  else
    m.clf->set_batch(g.batch);
  return m;
}

// max |a - b| over max(max |a|, floor).
double first_token_diff(const std::vector<float>& a, const std::vector<float>& b,
                        double floor = 1e-30) {
  EXPECT_EQ(a.size(), b.size());
  double scale = floor, diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    scale = std::max(scale, std::fabs(double(a[i])));
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
  }
  return diff / scale;
}

class FirstTokenHead : public ::testing::TestWithParam<FirstTokenCase> {};

TEST_P(FirstTokenHead, SameLogitsAndGradientsAsTheWholeLastLayer) {
  const GoldenCase g = GoldenCase::load(GetParam().fixture);
  FirstTokenModel whole = build_model(g, GetParam(), false);
  FirstTokenModel first = build_model(g, GetParam(), true);
  std::vector<float> logits[2];
  int i = 0;
  for (FirstTokenModel* m : {&whole, &first}) {
    for (uint32_t micro = 0; micro < 2; ++micro) {
      const DropoutPlan d{true, 77, micro};
      const TensorView out = m->clf->forward(d);
      if (micro == 1) logits[i] = to_vector(out);
      m->clf->loss({});
      m->clf->backward(d, 0.5f);
    }
    ++i;
  }
  // bf16: one 16-bit rounding apart (2^-8) where a GEMM over fewer rows rounds differently.
  const double tol = GetParam().compute == DType::F32 ? 1e-5 : 1e-2;
  const double logit_err = first_token_diff(logits[0], logits[1]);
  EXPECT_LT(logit_err, tol);
  const auto a = to_vector(whole.clf->trainable_grads()),
             b = to_vector(first.clf->trainable_grads());
  const double grad_err = first_token_diff(a, b);
  EXPECT_LT(grad_err, tol);
  double norm = 0;
  for (float v : b) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);
  // Each parameter's gradient on its own scale (a small one drowned by the largest would hide),
  // but not below 1e-3 of the largest: the key biases' gradients are zero but for rounding.
  double largest = 0;
  for (float v : a) largest = std::max(largest, std::fabs(double(v)));
  int checked = 0;
  for (const ParamSpec& spec : whole.clf->trainable_params().specs()) {
    const TensorView ga = whole.clf->grad(spec.name);
    if (!ga.defined()) continue;
    EXPECT_LT(first_token_diff(to_vector(ga), to_vector(first.clf->grad(spec.name)),
                               1e-3 * largest),
              10 * tol)
        << spec.name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  std::printf("%s: logits %.2e, gradients %.2e (of %zu) between the whole last layer and its first "
              "tokens\n",
              first_token_case_name(GetParam()).c_str(), logit_err, grad_err, a.size());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FirstTokenHead,
    ::testing::Values(FirstTokenCase{"bert_pair", PeftMethod::None, false},
                      FirstTokenCase{"bert_pair", PeftMethod::None, true},
                      FirstTokenCase{"bert_pair", PeftMethod::Lora, false},
                      FirstTokenCase{"bert_pair", PeftMethod::Lora, true},
                      FirstTokenCase{"bert_pair", PeftMethod::Dora, false},
                      FirstTokenCase{"bert_pair", PeftMethod::None, false, GradientCheckpointing::On},
                      FirstTokenCase{"bert_pair", PeftMethod::Lora, true, GradientCheckpointing::On},
                      FirstTokenCase{"bert_pair", PeftMethod::None, false,
                                     GradientCheckpointing::Off, DType::BF16},
                      FirstTokenCase{"bert_pair", PeftMethod::Lora, true, GradientCheckpointing::On,
                                     DType::BF16},
                      FirstTokenCase{"deberta_v3_pair", PeftMethod::None, false},
                      FirstTokenCase{"deberta_v3_pair", PeftMethod::None, true},
                      FirstTokenCase{"deberta_v3_pair", PeftMethod::Lora, true},
                      FirstTokenCase{"deberta_v3_pair", PeftMethod::Dora, false},
                      FirstTokenCase{"deberta_v3_pair", PeftMethod::Lora, false,
                                     GradientCheckpointing::On},
                      FirstTokenCase{"deberta_v3_pair", PeftMethod::None, true,
                                     GradientCheckpointing::On, DType::BF16}),
    [](const auto& info) { return first_token_case_name(info.param); });

// Inference: hidden() is (B, 1, C), the whole layer's first tokens; the logits are the same.
class FirstTokenHeadInference : public ::testing::TestWithParam<const char*> {};

TEST_P(FirstTokenHeadInference, HiddenIsTheFirstTokensOfTheWholeLayer) {
  const GoldenCase g = GoldenCase::load(GetParam());
  FirstTokenCase c;
  c.fixture = GetParam();
  FirstTokenModel whole = build_model(g, c, false);
  FirstTokenModel first = build_model(g, c, true);
  const auto lw = to_vector(whole.clf->forward(DropoutPlan{}));
  const auto lf = to_vector(first.clf->forward(DropoutPlan{}));
  EXPECT_LT(first_token_diff(lw, lf), 1e-5);
  const TensorView hw = whole.clf->hidden(), hf = first.clf->hidden();
  ASSERT_EQ(hw.rank(), 3);
  const int64_t B = hw.dim(0), T = hw.dim(1), C = hw.dim(2);
  ASSERT_EQ(hf.shape, (Shape{B, 1, C}));
  const auto vw = to_vector(hw), vf = to_vector(hf);
  std::vector<float> firsts;
  for (int64_t b = 0; b < B; ++b)
    firsts.insert(firsts.end(), vw.begin() + b * T * C, vw.begin() + b * T * C + C);
  EXPECT_LT(first_token_diff(firsts, vf), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, FirstTokenHeadInference,
                         ::testing::Values("bert_pair", "deberta_v3_pair"));

}  // namespace
}  // namespace ftune::test
