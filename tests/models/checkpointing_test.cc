// Gradient checkpointing with every dropout on (hidden, attention, classifier 0.1; LoRA dropout
// 0.1): the gradients are bit-identical to the run that keeps all activations, for full
// fine-tuning, LoRA and DoRA, over two micro-steps with different masks (accumulated), and the
// activation plan is smaller. Bitwise holds on CPU with the same thread count: the recomputed
// forward regenerates the same Philox masks and runs the same kernels.
#include <gtest/gtest.h>

#include <cstdio>

#include "adapter_init.h"
#include "golden_fixture.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"

namespace ftune::test {
namespace {

struct Model {
  std::unique_ptr<SequenceClassifier> clf;
  Arena arena;
  size_t act_bytes = 0;
};

Model build(const GoldenCase& c, PeftMethod method, GradientCheckpointing ckpt) {
  EncoderConfig config = load_model_config(c.model_dir);
  config.hidden_dropout = config.attention_dropout = config.classifier_dropout = 0.1f;
  ClassifierOptions o;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.checkpointing = ckpt;
  o.adapters.method = method;
  o.adapters.r = 3;
  o.adapters.alpha = 5;
  o.adapters.dropout = method == PeftMethod::Lora ? 0.1 : 0.0;  // DoRA takes no adapter dropout
  o.adapters.target_modules = {"query", "value", "intermediate.dense", "output.dense"};
  Model m;
  m.clf = std::make_unique<SequenceClassifier>(config, o);
  ArenaPlan plan;
  m.clf->add_to_plan(plan);
  for (const auto& [group, bytes] : plan.bytes_by_group())
    if (group == "act" || group == "gradact") m.act_bytes += bytes;
  m.arena = Arena(Device::cpu(), std::move(plan));
  m.clf->bind(m.arena);
  load_model_weights(*m.clf, c.model_dir);
  if (method != PeftMethod::None) {
    m.clf->init_adapters(5);
    randomize_lora_b(*m.clf);
  }
  m.clf->set_batch(c.batch);
  return m;
}

class Checkpointing : public ::testing::TestWithParam<PeftMethod> {};

TEST_P(Checkpointing, BitIdenticalGradientsWithDropoutAndLessActivationMemory) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  Model plain = build(c, GetParam(), GradientCheckpointing::Off);
  Model ckpt = build(c, GetParam(), GradientCheckpointing::On);
  for (Model* m : {&plain, &ckpt})
    for (uint32_t micro = 0; micro < 2; ++micro) {
      const DropoutPlan d{true, 77, micro};
      m->clf->forward(d);
      m->clf->loss({});
      m->clf->backward(d, 0.5f);
    }
  const auto a = to_vector(plain.clf->trainable_grads()),
             b = to_vector(ckpt.clf->trainable_grads());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a, b);
  double norm = 0;
  for (float g : a) norm += double(g) * g;
  EXPECT_GT(norm, 0.0);
  EXPECT_LT(ckpt.act_bytes, plain.act_bytes);
  std::printf("%s: %zu trainable, activations %zu bytes without checkpointing, %zu with\n",
              peft_method_name(GetParam()), a.size(), plain.act_bytes, ckpt.act_bytes);
}

INSTANTIATE_TEST_SUITE_P(Methods, Checkpointing,
                         ::testing::Values(PeftMethod::None, PeftMethod::Lora, PeftMethod::Dora),
                         [](const auto& info) {
                           return std::string(peft_method_name(info.param));
                         });

}  // namespace
}  // namespace ftune::test
