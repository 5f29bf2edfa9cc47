// The ModernBERT family beyond the golden fixtures: packed batches (varlen, no padding) compute
// what padded ones do with every dropout on (embedding, attention probabilities and output, MLP,
// classifier, adapters) and the local window shorter than the rows, as do checkpointed ones; both
// config.json spellings; the errors of unsupported configs; a head re-initialised for another
// label count as HF does; PEFT's target names over the family's modules; the FLOP model's windows.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/hf_checkpoint.h"
#include "models/modernbert/modernbert.h"
#include "models/modernbert/modernbert_config.h"

namespace ftune::test {
namespace {

struct ModelRun {
  std::unique_ptr<SequenceClassifier> model;
  Arena arena;
  LoadReport report;
};

ModelRun build(const GoldenCase& c, bool packed, const AdapterConfig& adapters = {},
               const LoadOptions& lo = {},
               GradientCheckpointing checkpointing = GradientCheckpointing::Off) {
  ModelRun r;
  ClassifierOptions o;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.packed = packed;
  o.max_tokens = c.batch.size * c.batch.seq_len;
  o.adapters = adapters;
  o.checkpointing = checkpointing;
  DropoutRates rates;
  rates.hidden = rates.attention = rates.classifier = 0.1f;
  r.model = std::make_unique<SequenceClassifier>(load_model_spec(c.model_dir, lo).with_dropout(rates), o);
  ArenaPlan plan;
  r.model->add_to_plan(plan);
  r.arena = Arena(Device::cpu(), std::move(plan));
  r.model->bind(r.arena);
  r.report = load_model_weights(*r.model, c.model_dir, lo);
  if (adapters.enabled()) r.model->init_adapters(7);
  r.model->set_batch(c.batch);
  return r;
}

class ModernBertFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(ModernBertFamily, PackedBatchesComputeWhatPaddedOnesDo) {
  const GoldenCase c = GoldenCase::load(GetParam());
  for (int method = 0; method < 3; ++method) {
    AdapterConfig adapters;
    if (method > 0) {
      adapters.method = method == 1 ? PeftMethod::Lora : PeftMethod::Dora;
      adapters.r = 4;
      adapters.alpha = 8;
      adapters.dropout = 0.2f;
      adapters.target_modules = {"Wqkv", "Wo", "Wi", "dense"};
    }
    ModelRun padded = build(c, false, adapters), packed = build(c, true, adapters);
    const DropoutPlan d{true, 11, 3};
    float loss[2];
    int i = 0;
    for (ModelRun* r : {&padded, &packed}) {
      r->model->forward(d);
      loss[i++] = to_vector(r->model->loss({}))[0];
      r->model->backward(d);
    }
    EXPECT_LT(std::fabs(loss[1] - loss[0]), 1e-6 * std::fabs(loss[0])) << method;
    EXPECT_LT(max_rel_error(packed.model->logits(), padded.model->logits()), 1e-5) << method;
    for (const ParamSpec& s : padded.model->trainable_params().specs())
      EXPECT_LT(max_rel_error(packed.model->grad(s.name), padded.model->grad(s.name)), 1e-5)
          << s.name << " method " << method;
    // Dropout is really on: another seed gives other logits.
    const TensorView again = padded.model->forward(DropoutPlan{true, 12, 3});
    EXPECT_GT(max_rel_error(again, packed.model->logits()), 1e-4) << method;
  }
}

TEST_P(ModernBertFamily, CheckpointingGivesIdenticalGradients) {
  // Full fine-tuning, packed, every dropout on: the recomputed layers draw the same masks.
  const GoldenCase c = GoldenCase::load(GetParam());
  ModelRun plain = build(c, true), ckpt = build(c, true, {}, {}, GradientCheckpointing::On);
  const DropoutPlan d{true, 5, 2};
  for (ModelRun* r : {&plain, &ckpt}) {
    r->model->forward(d);
    r->model->loss({});
    r->model->backward(d);
  }
  EXPECT_EQ(to_vector(plain.model->trainable_grads()), to_vector(ckpt.model->trainable_grads()));
}

INSTANTIATE_TEST_SUITE_P(Cases, ModernBertFamily, ::testing::Values("modernbert_cls", "modernbert_mean"));

nlohmann::json config_of(const std::string& name) {
  return io::read_json_file(fixtures_dir() + "/engine/" + name + "/model/config.json");
}

TEST(ModernBertConfig, LegacyKeysReadAsLayerTypesAndRopeParameters) {
  const nlohmann::json modern = config_of("modernbert_mean");
  nlohmann::json legacy = modern;
  legacy.erase("layer_types");
  legacy.erase("rope_parameters");
  legacy["global_attn_every_n_layers"] = 2;
  legacy["global_rope_theta"] = 1000.0;
  legacy["local_rope_theta"] = 50.0;
  const ModernBertConfig a = ModernBertConfig::from_json(modern, "m"),
                         b = ModernBertConfig::from_json(legacy, "l");
  EXPECT_EQ(a.global, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(b.global, a.global);
  EXPECT_EQ(b.global_rope.inv_freq(8), a.global_rope.inv_freq(8));
  EXPECT_EQ(b.local_rope.inv_freq(8), a.local_rope.inv_freq(8));
  EXPECT_NE(a.global_rope.inv_freq(8), a.local_rope.inv_freq(8));
  // HF's defaults: every third layer global, thetas 160000 and 10000, local window 128.
  legacy.erase("global_attn_every_n_layers");
  legacy.erase("global_rope_theta");
  legacy.erase("local_rope_theta");
  legacy.erase("local_attention");
  legacy["num_hidden_layers"] = 4;
  const ModernBertConfig d = ModernBertConfig::from_json(legacy, "d");
  EXPECT_EQ(d.global, (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(d.global_rope.theta, 160000.0);
  EXPECT_EQ(d.local_rope.theta, 10000.0);
  EXPECT_EQ(modernbert_attention_spec(d, 1).window.left, 64);
  EXPECT_EQ(modernbert_attention_spec(d, 1).window.right, 64);
  EXPECT_EQ(modernbert_attention_spec(d, 0).window.left, -1);
}

TEST(ModernBertConfig, UnsupportedOrInconsistentConfigsNameTheKey) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string message;
  } cases[] = {
      {[](nlohmann::json& j) { j["classifier_pooling"] = "max"; }, "classifier_pooling"},
      {[](nlohmann::json& j) { j["hidden_activation"] = "relu"; }, "hidden_activation"},
      {[](nlohmann::json& j) { j["classifier_activation"] = "tanh"; }, "classifier_activation"},
      {[](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; }, "layer_types"},
      {[](nlohmann::json& j) { j["layer_types"][1] = "chunked"; }, "layer_types[1]"},
      {[](nlohmann::json& j) { j["num_attention_heads"] = 5; }, "num_attention_heads 5"},
      {[](nlohmann::json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; },
       "rope_parameters.full_attention"},
      {[](nlohmann::json& j) { j["pad_token_id"] = 97; }, "pad token id 97"},
      {[](nlohmann::json& j) { j["local_attention"] = -2; }, "local_attention"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = config_of("modernbert_mean");
    c.edit(j);
    try {
      ModernBertConfig::from_json(j, "dir/config.json");
      ADD_FAILURE() << c.message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
    }
  }
}

TEST(ModernBertFamilyLoading, OtherLabelCountReinitialisesTheClassifierAsHfDoes) {
  const GoldenCase c = GoldenCase::load("modernbert_mean");
  LoadOptions lo;
  lo.num_labels = 5;
  lo.reinit_mismatched_head = true;
  ModelRun r = build(c, true, {}, lo);
  EXPECT_EQ(r.report.initialised, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  // HF: trunc_normal(0, hidden^-0.5) cut at initializer_cutoff_factor (2) standard deviations;
  // bias 0. Every other parameter is the checkpoint's.
  const std::vector<float> w = to_vector(r.model->param("classifier.weight"));
  ASSERT_EQ(w.size(), 5u * 32);
  const double sigma = 1.0 / std::sqrt(32.0);
  double sq = 0;
  for (float v : w) {
    EXPECT_LE(std::fabs(v), 2 * sigma + 1e-6);
    sq += double(v) * v;
  }
  const double rms = std::sqrt(sq / w.size());
  EXPECT_GT(rms, 0.6 * sigma);  // a 2-sigma truncated normal has rms 0.88 sigma
  EXPECT_LT(rms, 1.1 * sigma);
  for (float v : to_vector(r.model->param("classifier.bias"))) EXPECT_EQ(v, 0.0f);
  const HostTensor dense = c.tensor("step3.head.dense.weight");  // present: a checkpoint weight
  EXPECT_EQ(r.model->param("head.dense.weight").shape, dense.shape());
}

TEST(ModernBertFamilyModules, FlopModelCountsTheLocalWindowPerLayer) {
  // local_attention 4: keys i-2 .. i+2 on the sliding layer 1; layers 0 and 2 see the whole row.
  const FlopModel f = load_model_spec(fixtures_dir() + "/engine/modernbert_cls/model").backbone().flops();
  EXPECT_EQ(f.layer_windows, (std::vector<int64_t>{0, 5, 0}));
  EXPECT_TRUE(f.gated_ffn);
  EXPECT_EQ(f.intermediate, 37);
}

TEST(ModernBertFamilyModules, PeftTargetNamesResolveAsInPeft) {
  const std::vector<ClassifierModule> tree = modernbert_modules(2);
  AdapterConfig a;
  a.method = PeftMethod::Lora;
  a.target_modules = {"Wo"};  // PEFT's suffix rule: attn.Wo and mlp.Wo of every layer
  EXPECT_EQ(resolve_target_modules(a, tree, "peft"),
            (std::vector<std::string>{"model.layers.0.attn.Wo", "model.layers.0.mlp.Wo",
                                      "model.layers.1.attn.Wo", "model.layers.1.mlp.Wo"}));
  a.target_modules = {"all-linear"};  // every nn.Linear but the classifier: head.dense too
  const std::vector<std::string> all = resolve_target_modules(a, tree, "peft");
  EXPECT_EQ(all.size(), 9u);
  EXPECT_EQ(all.back(), "head.dense");
  a.target_modules = {"tok_embeddings"};
  EXPECT_THROW(resolve_target_modules(a, tree, "peft"), InputError);
}

}  // namespace
}  // namespace ftune::test
