// The decoder family beyond the golden fixtures: packed batches (varlen, no padding) compute what
// padded ones do, with attention dropout and a sliding window; config.json variants (legacy rope
// keys, no pad token) and the errors of unsupported or inconsistent ones; HF Trainer's decay rule.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/decoder/decoder_config.h"
#include "models/hf_checkpoint.h"

namespace ftune::test {
namespace {

struct DecoderRun {
  std::unique_ptr<SequenceClassifier> model;
  Arena arena;
};

DecoderRun build(const GoldenCase& c, bool packed, const AdapterConfig& adapters = {}) {
  DecoderRun r;
  ClassifierOptions o;
  o.max_batch = c.batch.size;
  o.max_seq = c.batch.seq_len;
  o.packed = packed;
  o.max_tokens = c.batch.size * c.batch.seq_len;
  o.adapters = adapters;
  DropoutRates rates;
  rates.attention = 0.1f;
  r.model = std::make_unique<SequenceClassifier>(load_model_spec(c.model_dir).with_dropout(rates), o);
  ArenaPlan plan;
  r.model->add_to_plan(plan);
  r.arena = Arena(Device::cpu(), std::move(plan));
  r.model->bind(r.arena);
  load_model_weights(*r.model, c.model_dir);
  if (adapters.enabled()) r.model->init_adapters(7);
  r.model->set_batch(c.batch);
  return r;
}

TEST(DecoderFamily, PackedBatchesComputeWhatPaddedOnesDo) {
  // Mistral: sliding window 4 over rows of 6 to 13 tokens; attention dropout 0.1 on.
  const GoldenCase c = GoldenCase::load("mistral_pair");
  for (bool lora : {false, true}) {
    AdapterConfig adapters;
    if (lora) {
      adapters.method = PeftMethod::Lora;
      adapters.r = 4;
      adapters.alpha = 8;
      adapters.dropout = 0.2f;
      adapters.target_modules = {"q_proj", "v_proj", "down_proj"};
    }
    DecoderRun padded = build(c, false, adapters), packed = build(c, true, adapters);
    const DropoutPlan d{true, 11, 3};
    for (DecoderRun* r : {&padded, &packed}) {
      r->model->forward(d);
      r->model->loss({});
      r->model->backward(d);
    }
    EXPECT_LT(max_rel_error(packed.model->logits(), padded.model->logits()), 1e-5) << lora;
    for (const ParamSpec& s : padded.model->trainable_params().specs())
      EXPECT_LT(max_rel_error(packed.model->grad(s.name), padded.model->grad(s.name)), 1e-5)
          << s.name << " lora " << lora;
    // Dropout is really on: another seed gives other logits.
    const TensorView again = padded.model->forward(DropoutPlan{true, 12, 3});
    EXPECT_GT(max_rel_error(again, packed.model->logits()), 1e-4);
  }
}

nlohmann::json llama_config() {
  return io::read_json_file(fixtures_dir() + "/engine/llama_pair/model/config.json");
}

TEST(DecoderConfig, LegacyRopeKeysReadAsRopeParameters) {
  nlohmann::json modern = llama_config(), legacy = llama_config();
  legacy.erase("rope_parameters");
  legacy["rope_theta"] = 10000.0;
  legacy["rope_scaling"] = {{"type", "llama3"},           {"factor", 8.0},
                            {"low_freq_factor", 1.0},     {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 16}};
  const DecoderConfig a = DecoderConfig::from_json(modern, "m"), b = DecoderConfig::from_json(legacy, "l");
  EXPECT_EQ(a.rope.inv_freq(a.head_dim), b.rope.inv_freq(b.head_dim));
  EXPECT_EQ(b.rope.type, "llama3");
  // The three llama3 bands of head_dim 6 (wavelengths 6.3, 136 and 2920 against 4 and 16): the
  // first is blended, the others divided by the factor.
  const std::vector<float> inv = a.rope.inv_freq(6);
  const float base1 = 1.0f / std::pow(10000.0f, 2.0f / 6.0f);
  EXPECT_FLOAT_EQ(inv[1], base1 / 8.0f);
  EXPECT_GT(inv[0], 1.0f / 8.0f);
  EXPECT_LT(inv[0], 1.0f);
}

TEST(DecoderConfig, NoPadTokenPoolsOnEos) {
  nlohmann::json j = llama_config();
  j.erase("pad_token_id");
  const DecoderConfig c = DecoderConfig::from_json(j, "config.json");
  EXPECT_TRUE(c.pad_from_eos);
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.embedding_padding_idx, -1);  // nn.Embedding(padding_idx=None): eos trains
}

TEST(DecoderConfig, UnsupportedOrInconsistentConfigsNameTheKey) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string message;
  } cases[] = {
      {[](nlohmann::json& j) { j["rope_parameters"]["rope_type"] = "proportional"; }, "rope type 'proportional'"},
      {[](nlohmann::json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads 3"},
      {[](nlohmann::json& j) { j["head_dim"] = 5; }, "head_dim 5"},
      {[](nlohmann::json& j) { j["pretraining_tp"] = 2; }, "pretraining_tp"},
      {[](nlohmann::json& j) { j["hidden_act"] = "relu"; }, "hidden_act"},
      {[](nlohmann::json& j) { j["rope_parameters"].erase("factor"); }, "'factor'"},
      {[](nlohmann::json& j) { j["pad_token_id"] = 97; }, "pad token id 97"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = llama_config();
    c.edit(j);
    try {
      DecoderConfig::from_json(j, "dir/config.json");
      ADD_FAILURE() << c.message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
    }
  }
  nlohmann::json qwen = io::read_json_file(fixtures_dir() + "/engine/qwen2_pair/model/config.json");
  qwen["use_sliding_window"] = true;
  qwen["sliding_window"] = 4;
  qwen["layer_types"] = {"full_attention"};
  EXPECT_THROW(DecoderConfig::from_json(qwen, "q"), InputError);
  qwen["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_EQ(DecoderConfig::from_json(qwen, "q").window, (std::vector<int64_t>{0, 4}));
  qwen["use_sliding_window"] = false;  // HF then drops the window on every layer
  EXPECT_EQ(DecoderConfig::from_json(qwen, "q").window, (std::vector<int64_t>{0, 0}));
}

nlohmann::json engine_config(const std::string& name) {
  return io::read_json_file(fixtures_dir() + "/engine/" + name + "/model/config.json");
}

TEST(DecoderConfig, GemmaReadsItsKeysAndDefaults) {
  const DecoderConfig g2 = DecoderConfig::from_json(engine_config("gemma2_pair"), "g2");
  EXPECT_EQ(g2.norm_offset, 1.0f);
  EXPECT_TRUE(g2.sandwich_norms);
  EXPECT_EQ(g2.activation, GluAct::GeluTanh);
  EXPECT_EQ(g2.embed_scale, static_cast<float>(std::sqrt(48.0)));
  EXPECT_EQ(g2.attention_scale, static_cast<float>(std::pow(20.0, -0.5)));
  EXPECT_EQ(g2.softcap, 3.0f);
  EXPECT_EQ(g2.window, (std::vector<int64_t>{4, 0, 4}));
  EXPECT_FALSE(g2.two_ropes());
  // HF rounds sqrt(hidden) to the 16-bit weight type: sqrt(3072) = 55.43 is 55.5 in bf16.
  DecoderConfig big = g2;
  big.embed_scale = std::sqrt(3072.0f);
  EXPECT_EQ(big.embed_scale_in(DType::BF16), 55.5f);
  EXPECT_EQ(big.embed_scale_in(DType::F32), big.embed_scale);

  // Gemma 2's class defaults for missing keys; null switches soft-capping off.
  nlohmann::json j = engine_config("gemma2_pair");
  for (const char* k : {"layer_types", "attn_logit_softcapping", "query_pre_attn_scalar",
                        "sliding_window", "hidden_activation"})
    j.erase(k);
  DecoderConfig d = DecoderConfig::from_json(j, "g2");
  EXPECT_EQ(d.softcap, 50.0f);
  EXPECT_EQ(d.attention_scale, 1.0f / 16.0f);
  EXPECT_EQ(d.window, (std::vector<int64_t>{4096, 0, 4096}));
  EXPECT_EQ(d.activation, GluAct::GeluTanh);
  j["attn_logit_softcapping"] = nullptr;
  EXPECT_EQ(DecoderConfig::from_json(j, "g2").softcap, 0.0f);
  j["use_bidirectional_attention"] = true;
  EXPECT_THROW(DecoderConfig::from_json(j, "g2"), InputError);
}

TEST(DecoderConfig, Gemma1IsGemmaWithoutSandwichNormsSoftCapOrWindows) {
  nlohmann::json j = engine_config("gemma_pair");
  const DecoderConfig g = DecoderConfig::from_json(j, "g1");
  EXPECT_EQ(g.norm_offset, 1.0f);
  EXPECT_FALSE(g.sandwich_norms);
  EXPECT_FALSE(g.qk_norm);
  EXPECT_EQ(g.softcap, 0.0f);
  EXPECT_EQ(g.window, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(g.embed_scale, static_cast<float>(std::sqrt(48.0)));
  EXPECT_EQ(g.attention_scale, 1.0f / std::sqrt(10.0f));  // head_dim^-1/2, no query_pre_attn_scalar
  EXPECT_EQ(g.activation, GluAct::GeluTanh);
  // The Hub's Gemma 1 configs say hidden_act "gelu": HF's GemmaConfig reads it as the tanh form.
  j["hidden_act"] = "gelu";
  EXPECT_EQ(DecoderConfig::from_json(j, "g1").activation, GluAct::GeluTanh);
  j.erase("hidden_act");
  j.erase("head_dim");
  EXPECT_EQ(DecoderConfig::from_json(j, "g1").activation, GluAct::GeluTanh);
  EXPECT_EQ(DecoderConfig::from_json(j, "g1").head_dim, 256);  // GemmaConfig's default
}

TEST(DecoderConfig, MultimodalGemma3ReadsItsTextConfigWithTheOuterLabels) {
  nlohmann::json j = engine_config("gemma3_mm_pair");
  j["id2label"] = {{"0", "no"}, {"1", "yes"}};
  j["label2id"] = {{"no", 0}, {"yes", 1}};
  j["text_config"]["pad_token_id"] = 5;
  const DecoderConfig m = DecoderConfig::from_json(j, "mm");
  const DecoderConfig t = DecoderConfig::from_json(engine_config("gemma3_pair"), "t");
  EXPECT_EQ(m.model_type, "gemma3");
  EXPECT_EQ(m.architecture, "Gemma3ForSequenceClassification");
  EXPECT_EQ(m.prefix, "model.language_model.");
  EXPECT_EQ(m.id2label, (std::vector<std::string>{"no", "yes"}));
  EXPECT_EQ(m.pad_token_id, 5);  // HF pools by get_text_config().pad_token_id
  EXPECT_EQ(m.window, t.window);
  EXPECT_EQ(m.uses_local_rope, t.uses_local_rope);
  EXPECT_EQ(m.attention_scale, t.attention_scale);
  EXPECT_TRUE(m.qk_norm && m.sandwich_norms);
  // Saved back whole (vision_config included), with the outer labels.
  const nlohmann::json back = m.to_json();
  EXPECT_EQ(back["model_type"], "gemma3");
  EXPECT_EQ(back["vision_config"], j["vision_config"]);
  EXPECT_EQ(back["id2label"]["1"], "yes");
  j.erase("text_config");
  try {
    DecoderConfig::from_json(j, "mm/config.json");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mm/config.json: model_type gemma3 needs a 'text_config'"),
              std::string::npos)
        << e.what();
  }
}

TEST(DecoderConfig, Gemma3LegacyRopeKeysReadAsPerLayerTypeParameters) {
  const nlohmann::json modern = engine_config("gemma3_pair");
  const DecoderConfig a = DecoderConfig::from_json(modern, "g3");
  EXPECT_TRUE(a.two_ropes());
  EXPECT_EQ(a.uses_local_rope, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(a.softcap, 0.0f);  // HF's Gemma 3 attention never soft-caps
  EXPECT_EQ(a.rope.type, "linear");
  EXPECT_EQ(a.rope.theta, 100.0);
  EXPECT_EQ(a.local_rope.theta, 10000.0);
  // As the Hub's Gemma 3 configs spell it: rope_theta / rope_scaling for the global layers,
  // rope_local_base_freq for the local ones, sliding_window_pattern instead of layer_types.
  nlohmann::json legacy = modern;
  legacy.erase("rope_parameters");
  legacy.erase("layer_types");
  legacy["rope_theta"] = 100.0;
  legacy["rope_local_base_freq"] = 10000.0;
  legacy["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  legacy["sliding_window_pattern"] = 2;
  const DecoderConfig b = DecoderConfig::from_json(legacy, "g3");
  EXPECT_EQ(b.uses_local_rope, a.uses_local_rope);
  EXPECT_EQ(b.window, a.window);
  EXPECT_EQ(b.rope.inv_freq(b.head_dim), a.rope.inv_freq(a.head_dim));
  EXPECT_EQ(b.local_rope.inv_freq(b.head_dim), a.local_rope.inv_freq(a.head_dim));
  legacy.erase("sliding_window_pattern");  // HF's default: every 6th layer global
  EXPECT_EQ(DecoderConfig::from_json(legacy, "g3").window, (std::vector<int64_t>{4, 4, 4}));
  legacy.erase("rope_theta");
  legacy.erase("rope_local_base_freq");
  const DecoderConfig c = DecoderConfig::from_json(legacy, "g3");
  EXPECT_EQ(c.rope.theta, 1000000.0);
  EXPECT_EQ(c.local_rope.theta, 10000.0);
}

TEST(DecayRule, FollowsTransformersPatterns) {
  for (const char* no : {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                         "model.layers.0.self_attn.q_norm.weight", "bert.embeddings.LayerNorm.weight",
                         "model.layers.0.self_attn.q_proj.bias", "norm.weight", "x.rmsnorm.w"})
    EXPECT_FALSE(ParamTable::default_decay(no)) << no;
  for (const char* yes : {"model.layers.0.self_attn.q_proj.weight", "score.weight",
                          "model.normalizer.weight", "model.enorm.weight"})
    EXPECT_TRUE(ParamTable::default_decay(yes)) << yes;
}

}  // namespace
}  // namespace ftune::test
