// Parity of ftune's LoRA / rsLoRA / DoRA with PEFT on golden fixtures
// (tools/make_peft_fixtures.py): starting from PEFT's saved adapter on the tiny engine BERT /
// RoBERTa, the modules adapted (PEFT's reading of target_modules, BERT's pooler included), the
// logits, loss and every trainable gradient, then the trainable parameters after three AdamW
// steps, at max relative error 1e-4 — with adapter dropout too (DoRA's dropout variant), PEFT
// running ftune's Philox masks, whose keying is checked bit for bit. Also: gradient checkpointing
// gives bit-identical gradients with a smaller activation plan, and an adapter saved by ftune
// reloads exactly. The multimodal Gemma 3's adapter also holds PEFT's vision-tower q / k / v
// adapters (text-only input never reaches them): ftune loads the text part, ignoring those. With
// FTUNE_PEFT_OUT=DIR set, each case also writes its trained adapter, logits and merged model there
// for `make_peft_fixtures.py --check`.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/adapters.h"
#include "models/bert/classification_head.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "ops/dropout.h"
#include "optim/adamw.h"

namespace ftune::test {
namespace {

constexpr double kTol = 1e-4;

struct PeftCase {
  std::string dir, base_dir, adapter_dir;
  nlohmann::json meta;
  Batch batch;
  io::SafetensorsFile expected;
  HostTensor tensor(const std::string& name) const { return expected.read(name, DType::F32); }
};

PeftCase load_case(const std::string& name) {
  const std::string dir = fixtures_dir() + "/peft/" + name;
  nlohmann::json meta = io::read_json_file(dir + "/case.json");
  const std::string base = meta["base"].get<std::string>();  // "engine/bert_pair"
  const GoldenCase g = GoldenCase::load(base.substr(base.find('/') + 1));
  return PeftCase{dir,  g.model_dir, dir + "/adapter",
                  meta, g.batch,     io::SafetensorsFile::open(dir + "/expected.safetensors")};
}

struct PeftRun {
  std::unique_ptr<SequenceClassifier> model;
  std::unique_ptr<AdamW> adamw;
  Arena arena;
};

PeftRun build(const PeftCase& c, GradientCheckpointing ckpt = GradientCheckpointing::Off) {
  PeftRun r;
  ClassifierOptions o;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.adapters = read_peft_adapter_config(c.adapter_dir);
  o.checkpointing = ckpt;
  r.model = std::make_unique<SequenceClassifier>(load_model_spec(c.base_dir), o);
  AdamWOptions adam = fixture_adamw(c.meta["optimizer"]);
  r.adamw = std::make_unique<AdamW>(r.model->trainable_params(), adam);
  ArenaPlan plan;
  r.model->add_to_plan(plan);
  r.adamw->add_to_plan(plan);
  r.arena = Arena(Device::cpu(), std::move(plan));
  r.model->bind(r.arena);
  r.adamw->bind(r.arena);
  load_model_weights(*r.model, c.base_dir);
  load_peft_adapter(*r.model, c.adapter_dir);
  r.model->set_batch(c.batch);
  return r;
}

// The training pass of optimizer step `step`: the fixtures' model dropouts are all 0; adapter
// dropout (when the case has it) draws ftune's masks of (dropout_seed, site, step), as PEFT did.
DropoutPlan train_plan(const PeftCase& c, int step = 0) {
  return DropoutPlan{true, c.meta.value("dropout_seed", uint64_t{0}), static_cast<uint32_t>(step)};
}

size_t activation_bytes(const Arena& arena) {
  size_t total = 0;
  for (const auto& [group, bytes] : arena.plan().bytes_by_group())
    if (group == "act" || group == "gradact") total += bytes;
  return total;
}

class PeftParity : public ::testing::TestWithParam<std::string> {};

TEST_P(PeftParity, TrainableSetLogitsLossAndGradients) {
  const PeftCase c = load_case(GetParam());
  PeftRun r = build(c);
  // Exactly PEFT's trainable parameters, with HF Trainer's decay split.
  std::vector<std::string> names;
  for (const ParamSpec& s : r.model->trainable_params().specs()) names.push_back(s.name);
  std::vector<std::string> want = c.meta["trainable"].get<std::vector<std::string>>();
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
  std::set<std::string> no_decay;
  for (const auto& n : c.meta["no_decay"]) no_decay.insert(n.get<std::string>());
  for (const ParamSpec& s : r.model->trainable_params().specs())
    EXPECT_EQ(s.decay, !no_decay.count(s.name)) << s.name;
  EXPECT_FLOAT_EQ(r.model->options().adapters.scaling(), c.meta["scaling"].get<float>());

  const TensorView logits = r.model->forward(train_plan(c));
  const double e_logits = max_rel_error(logits, c.tensor("logits").view());
  EXPECT_LT(e_logits, kTol);
  const TensorView loss = r.model->loss({});
  EXPECT_LT(max_rel_error(loss, c.tensor("loss").view()), kTol);
  r.model->backward(train_plan(c));
  double worst = 0;
  for (const ParamSpec& s : r.model->trainable_params().specs()) {
    const double e = max_rel_error(r.model->grad(s.name), c.tensor("grad." + s.name).view());
    EXPECT_LT(e, kTol) << s.name;
    worst = std::max(worst, e);
  }
  std::printf("%s: logits %.2e, worst of %zu gradients %.2e\n", GetParam().c_str(), e_logits,
              names.size(), worst);
}

TEST_P(PeftParity, ThreeAdamWSteps) {
  const PeftCase c = load_case(GetParam());
  PeftRun r = build(c);
  const auto losses = to_vector(c.tensor("losses").view());
  const float lr = c.meta["optimizer"]["lr"].get<float>();
  for (int step = 0; step < c.meta["steps"].get<int>(); ++step) {
    r.model->zero_grad();
    r.model->forward(train_plan(c, step));
    const float loss = to_vector(r.model->loss({}))[0];
    EXPECT_NEAR(loss, losses[step], kTol * std::fabs(losses[step])) << "step " << step;
    r.model->backward(train_plan(c, step));
    r.adamw->step(r.model->trainable_values(), r.model->trainable_grads(), lr);
  }
  // Elements whose first gradient is fp32-noise-sized are held to 3 lr (compare_after_adam).
  double worst = 0;
  int ill_conditioned = 0;
  for (const ParamSpec& s : r.model->trainable_params().specs()) {
    const AdamComparison cmp =
        compare_after_adam(r.model->param(s.name), c.tensor("step3." + s.name).view(),
                           c.tensor("grad." + s.name).view(), 3 * lr, s.name);
    EXPECT_LT(cmp.rel_error, kTol) << s.name;
    worst = std::max(worst, cmp.rel_error);
    ill_conditioned += cmp.noise_elements;
  }
  std::printf("%s: %d elements with noise-sized first gradients (held to 3 lr)\n",
              GetParam().c_str(), ill_conditioned);
  std::printf("%s: worst trainable parameter after 3 AdamW steps %.2e\n", GetParam().c_str(),
              worst);

  // Save in PEFT's format and load into a fresh model: the same bits.
  TempDir tmp;
  save_peft_adapter(*r.model, tmp.path() + "/adapter");
  PeftCase reloaded = load_case(GetParam());
  reloaded.adapter_dir = tmp.path() + "/adapter";
  PeftRun r2 = build(reloaded);
  for (const ParamSpec& s : r.model->trainable_params().specs())
    EXPECT_EQ(to_vector(r.model->param(s.name)), to_vector(r2.model->param(s.name))) << s.name;

  if (const char* out = std::getenv("FTUNE_PEFT_OUT")) {
    // For tools/make_peft_fixtures.py --check: PEFT must reproduce these logits.
    const std::string dir = std::string(out) + "/" + GetParam();
    save_peft_adapter(*r.model, dir + "/adapter");
    const TensorView logits = r.model->forward(DropoutPlan{});
    io::write_safetensors(dir + "/ftune_logits.safetensors", {{"logits", logits, {}}});
    io::write_json_atomic(dir + "/ftune_case.json", {{"base", c.meta["base"]}});
    merge_adapters(*r.model);
    save_model(*r.model, dir + "/merged");
  }
}

// Gradient checkpointing: the same gradients bit for bit, and less activation memory.
TEST_P(PeftParity, CheckpointingGivesIdenticalGradients) {
  const PeftCase c = load_case(GetParam());
  PeftRun plain = build(c), ckpt = build(c, GradientCheckpointing::On);
  for (PeftRun* r : {&plain, &ckpt}) {
    r->model->forward(train_plan(c));
    r->model->loss({});
    r->model->backward(train_plan(c));
  }
  EXPECT_EQ(to_vector(plain.model->trainable_grads()), to_vector(ckpt.model->trainable_grads()));
  EXPECT_LT(activation_bytes(ckpt.arena), activation_bytes(plain.arena));
  std::printf("%s: activation bytes %zu without checkpointing, %zu with\n", GetParam().c_str(),
              activation_bytes(plain.arena), activation_bytes(ckpt.arena));
}

// ftune adapts exactly the modules PEFT adapted for the case's target_modules (PEFT's suffix rule
// takes bert.pooler.dense with "dense" and all-linear), and the dropout masks PEFT ran with are
// ftune's own, bit for bit (the Python reimplementation of the Philox keying is right).
TEST_P(PeftParity, SameModulesAndDropoutMasksAsPeft) {
  const PeftCase c = load_case(GetParam());
  PeftRun r = build(c);
  std::vector<std::string> adapted;
  for (const ParamSpec& s : r.model->adapter_params().specs())
    if (s.name.ends_with(".lora_A.weight"))
      adapted.push_back(s.name.substr(0, s.name.size() - std::string(".lora_A.weight").size()));
  std::sort(adapted.begin(), adapted.end());
  if (c.meta.contains("adapted_modules"))
    EXPECT_EQ(adapted, c.meta["adapted_modules"].get<std::vector<std::string>>());
  const float p = c.meta.value("lora_dropout", 0.0f);
  int masks = 0;
  for (const io::SafetensorsEntry& e : c.expected.entries()) {
    if (!e.name.starts_with("mask.")) continue;
    const std::string module = e.name.substr(5);
    const HostTensor want = c.tensor(e.name);
    // The module's place among the family's adapter sites gives its Philox site.
    uint32_t site = pooler_adapter_dropout_site();
    if (module != "bert.pooler.dense")
      for (const AdapterSite& a : r.model->spec().backbone().adapter_sites())
        if (a.module == module) site = adapter_dropout_site(a.layer, a.kind);
    HostTensor ones(DType::F32, want.shape());
    for (int64_t i = 0; i < ones.numel(); ++i) ones.data<float>()[i] = 1.0f;
    dropout_forward(ones.view(), ones.view(), p, RngKey{c.meta["dropout_seed"].get<uint64_t>(), site, 0});
    EXPECT_EQ(to_vector(ones.view()), to_vector(want.view())) << module;
    ++masks;
  }
  EXPECT_EQ(masks > 0, p > 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, PeftParity,
                         ::testing::Values("bert_lora", "bert_rslora", "bert_dora", "roberta_lora",
                                           "roberta_rslora", "roberta_dora", "bert_lora_pooler",
                                           "bert_dora_dropout", "roberta_dora_dropout",
                                           "llama_lora", "qwen2_dora", "mistral_dora_dropout",
                                           "qwen3_lora", "gemma_dora_dropout", "gemma2_lora",
                                           "gemma3_dora_dropout", "gemma3_mm_lora",
                                           "deberta_v3_lora", "deberta_v3_dora",
                                           "deberta_v3_dora_dropout", "deberta_v2_lora"));

// ModernBERT (tools/make_peft_fixtures.py): LoRA on Wqkv, both Wo and Wi; DoRA with adapter dropout
// on all-linear, head.dense included.
INSTANTIATE_TEST_SUITE_P(ModernBert, PeftParity,
                         ::testing::Values("modernbert_lora", "modernbert_dora_dropout"));

}  // namespace
}  // namespace ftune::test
