// Frozen weights stay 16-bit (SequenceClassifier::frozen_16bit): with LoRA and bf16 compute the
// frozen layers' GEMM weights and the embedding tables are stored once, in bf16, with no fp32 copy.
// The memory plan counts them so (parameters and weight shadow by category, BERT-base sized, with
// and without adapters); loaded weights are the checkpoint's rounded to bf16 and the biases /
// LayerNorms stay fp32; the
// adapter saved from such a model reloads to the same logits bit for bit; merging into the bf16
// base rounds each merged weight once (within 2^-7 of the tensor's largest value, of the fp32
// merge: the base's bf16 rounding and the merged weight's) and the merged model, saved
// as fp32 and reloaded without adapters, predicts what the adapter model did within bf16's
// tolerance; merged and saved from the checkpoint's own precision (save_merged_model), it is the
// fp32 merge bit for bit.
#include <gtest/gtest.h>

#include <cmath>

#include "adapter_init.h"
#include "core/memory.h"
#include "golden_fixture.h"
#include "io/safetensors.h"
#include "models/bert/bert_checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "train/memory_planner.h"

namespace ftune::test {
namespace {

ClassifierOptions options(const GoldenCase& c, DType compute, PeftMethod method) {
  ClassifierOptions o;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.training = true;
  o.compute = compute;
  o.adapters.method = method;
  o.adapters.r = 4;
  o.adapters.alpha = 8;
  o.adapters.target_modules = {"query", "value", "intermediate.dense", "output.dense"};
  return o;
}

struct Model {
  std::unique_ptr<SequenceClassifier> clf;
  Arena arena;
};

Model build(const GoldenCase& c, DType compute, PeftMethod method, const std::string& dir) {
  Model m;
  m.clf = std::make_unique<SequenceClassifier>(load_model_config(dir), options(c, compute, method));
  ArenaPlan plan;
  m.clf->add_to_plan(plan);
  m.arena = Arena(Device::cpu(), std::move(plan));
  m.clf->bind(m.arena);
  load_model_weights(*m.clf, dir);
  m.clf->set_batch(c.batch);
  return m;
}

std::vector<float> as_f32(TensorView v) {
  HostTensor h(DType::F32, v.shape);
  convert_copy(h.view(), v);
  return to_vector(h.view());
}

std::vector<float> logits(Model& m) { return to_vector(m.clf->forward(DropoutPlan{})); }

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return diff / ref;
}

size_t category(const MemoryPlan& p, const std::string& name) {
  for (const auto& c : p.categories)
    if (c.name == name) return c.bytes;
  ADD_FAILURE() << "no category " << name;
  return 0;
}

TEST(Frozen16, PlannerCountsTheFrozenLayersOnceIn16Bits) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  EncoderConfig base = load_model_config(c.model_dir);  // sized as BERT-base
  base.hidden_size = 768;
  base.num_heads = 12;
  base.intermediate_size = 3072;
  base.num_layers = 12;
  base.vocab_size = 30522;
  base.max_position_embeddings = 512;
  auto plan_of = [&](DType compute, PeftMethod method) {
    SequenceClassifier clf(base, options(c, compute, method));
    ArenaPlan plan;
    clf.add_to_plan(plan);
    return std::make_pair(MemoryPlan::from(plan, Device::cpu()), clf.frozen_16bit());
  };
  const auto [lora32, f1] = plan_of(DType::F32, PeftMethod::Lora);
  const auto [lora16, f2] = plan_of(DType::BF16, PeftMethod::Lora);
  const auto [full16, f3] = plan_of(DType::BF16, PeftMethod::None);
  const auto [dora16, f4] = plan_of(DType::BF16, PeftMethod::Dora);
  EXPECT_FALSE(f1);
  EXPECT_TRUE(f2);
  EXPECT_FALSE(f3);  // full fine-tuning trains them: fp32 master + bf16 shadow as before
  EXPECT_FALSE(f4);  // DoRA reads the fp32 base (weight norms, its dropout GEMM)
  // The layers' GEMM matrices: 12 x (4 C^2 + 2 C F); the word, position and token-type tables.
  const size_t matrices = 12 * (4 * 768 * 768 + 2 * 768 * 3072);
  const size_t tables = (30522 + 512 + 2) * 768;
  const size_t slack = 4096;  // buffer alignment
  EXPECT_EQ(category(lora16, "weight shadow"), 0u);
  EXPECT_EQ(category(lora32, "weight shadow"), 0u);
  EXPECT_GT(category(full16, "weight shadow"), 2 * matrices);
  // Before: the fp32 parameters and a bf16 shadow of the layers (as full16 plans them, plus the
  // adapters); now: the matrices and the embedding tables in bf16 alone.
  const size_t before = category(lora32, "parameters") + category(full16, "weight shadow");
  const size_t now = category(lora16, "parameters") + category(lora16, "weight shadow");
  EXPECT_NEAR(double(before - now), double(4 * matrices + 2 * tables), double(slack));
  EXPECT_NEAR(double(category(lora32, "parameters") - category(lora16, "parameters")),
              double(2 * matrices + 2 * tables), double(slack) + 2.0 * 12 * (9 * 768 + 3072));
  EXPECT_EQ(category(lora16, "gradients"), category(lora32, "gradients"));
  EXPECT_EQ(category(lora16, "optimizer state"), category(lora32, "optimizer state"));
  std::printf("BERT-base LoRA r4: fp32 parameters %zu; bf16 before: parameters %zu + shadow %zu; "
              "bf16 now: parameters %zu + shadow %zu (saves %zu bytes); full bf16: %zu + %zu\n",
              category(lora32, "parameters"), category(lora32, "parameters"),
              category(full16, "weight shadow"), category(lora16, "parameters"),
              category(lora16, "weight shadow"), before - now, category(full16, "parameters"),
              category(full16, "weight shadow"));
}

TEST(Frozen16, WeightsAreTheCheckpointsRoundedAndBiasesStayFp32) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  Model f32 = build(c, DType::F32, PeftMethod::Lora, c.model_dir);
  Model bf = build(c, DType::BF16, PeftMethod::Lora, c.model_dir);
  ASSERT_TRUE(bf.clf->frozen_16bit());
  EXPECT_FALSE(bf.clf->param_values().defined());
  int matrices = 0;
  for (const ParamSpec& s : f32.clf->params().specs()) {
    const TensorView v = bf.clf->param(s.name);
    const bool layer_matrix = s.name.find(".layer.") != std::string::npos && s.shape.rank() == 2;
    const bool table = s.name.find(".embeddings.") != std::string::npos && s.shape.rank() == 2;
    EXPECT_EQ(v.dtype, layer_matrix || table ? DType::BF16 : DType::F32) << s.name;
    std::vector<float> want = to_vector(f32.clf->param(s.name));
    if (layer_matrix || table) {
      matrices += layer_matrix;
      HostTensor r(DType::BF16, s.shape), w(DType::F32, s.shape);
      convert(r.view(), f32.clf->param(s.name));
      convert(w.view(), r.view());
      want = to_vector(w.view());
    }
    EXPECT_EQ(as_f32(v), want) << s.name;
  }
  EXPECT_EQ(matrices, 6 * load_model_config(c.model_dir).num_layers);
}

TEST(Frozen16, AdapterAndMergedModelReloadAndPredict) {
  const GoldenCase c = GoldenCase::load("bert_pair");
  TempDir tmp;
  const std::string adapter = tmp.path() + "/adapter", merged = tmp.path() + "/merged";
  Model bf = build(c, DType::BF16, PeftMethod::Lora, c.model_dir);
  bf.clf->init_adapters(3);
  randomize_lora_b(*bf.clf);
  const std::vector<float> want = logits(bf);
  save_peft_adapter(*bf.clf, adapter, c.model_dir);

  // The adapter on a fresh bf16 base: the same bits.
  Model again = build(c, DType::BF16, PeftMethod::Lora, c.model_dir);
  load_peft_adapter(*again.clf, adapter);
  EXPECT_EQ(logits(again), want);

  // Merging into the bf16 base rounds each merged weight twice (base, then sum): within 2^-7 (of the tensor's
  // largest value) of the fp32 merge of the same adapter.
  Model f32 = build(c, DType::F32, PeftMethod::Lora, c.model_dir);
  load_peft_adapter(*f32.clf, adapter);
  const std::vector<float> want32 = logits(f32);
  merge_adapters(*f32.clf);
  merge_adapters(*bf.clf);
  for (const ParamSpec& s : f32.clf->params().specs()) {
    const std::vector<float> a = as_f32(bf.clf->param(s.name)), b = to_vector(f32.clf->param(s.name));
    EXPECT_LE(rel(a, b), std::ldexp(1.0, -7)) << s.name;
  }
  // Saved as fp32 (as before), reloaded without adapters: the adapter model's predictions within
  // bf16's tolerance (2e-2 of the largest logit), both in bf16 and in fp32.
  save_model(*bf.clf, merged);
  const io::SafetensorsFile f = io::SafetensorsFile::open(merged + "/model.safetensors");
  for (const io::SafetensorsEntry& e : f.entries())
    EXPECT_EQ(e.dtype, io::SafetensorsDtype::F32) << e.name;
  Model plain16 = build(c, DType::BF16, PeftMethod::None, merged);
  Model plain32 = build(c, DType::F32, PeftMethod::None, merged);
  EXPECT_LE(rel(logits(plain16), want), 2e-2);
  EXPECT_LE(rel(logits(plain32), want32), 2e-2);
  EXPECT_NE(logits(plain32), want32);  // the bf16 rounding of the base is really there

  // save_merged_model (what a run publishes) keeps the checkpoint's fp32: the merged weights are
  // the fp32 model's merge, bit for bit.
  const std::string merged_full = tmp.path() + "/merged_full";
  save_merged_model(*again.clf, c.model_dir, merged_full);
  Model full32 = build(c, DType::F32, PeftMethod::None, merged_full);
  for (const ParamSpec& s : f32.clf->params().specs())
    EXPECT_EQ(to_vector(full32.clf->param(s.name)), to_vector(f32.clf->param(s.name))) << s.name;
}

}  // namespace
}  // namespace ftune::test
