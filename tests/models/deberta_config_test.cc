// DeBERTa-v2/v3 config.json reading (models/deberta/deberta_config.h) and the family's
// registration:
// DebertaV2Config's defaults and its legacy "p2c|c2p" string, the relative-position settings as
// the attention op gets them, typed errors naming the file and key for what ftune does not run,
// and the family's names (PEFT modules, adapter sites, labels written back).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "models/backbone.h"
#include "models/deberta/deberta_config.h"

namespace ftune::test {
namespace {

nlohmann::json v3_base() {
  return {{"model_type", "deberta-v2"},   {"vocab_size", 128100},
          {"hidden_size", 768},           {"num_hidden_layers", 12},
          {"num_attention_heads", 12},    {"intermediate_size", 3072},
          {"max_position_embeddings", 512}, {"relative_attention", true},
          {"position_buckets", 256},      {"max_relative_positions", -1},
          {"pos_att_type", "p2c|c2p"},    {"share_att_key", true},
          {"norm_rel_ebd", "layer_norm"}, {"position_biased_input", false},
          {"type_vocab_size", 0},         {"pooler_hidden_act", "gelu"},
          {"hidden_dropout_prob", 0.1},   {"layer_norm_eps", 1e-7}};
}

TEST(DebertaConfig, ReadsDebertaV3BaseAsTransformersDoes) {
  const DebertaConfig c = DebertaConfig::from_json(v3_base(), "config.json");
  EXPECT_TRUE(c.c2p);
  EXPECT_TRUE(c.p2c);
  EXPECT_TRUE(c.share_att_key);
  EXPECT_TRUE(c.norm_rel_ebd);
  EXPECT_FALSE(c.position_biased_input);
  EXPECT_EQ(c.max_relative_positions, 512);  // -1: max_position_embeddings
  EXPECT_EQ(c.rel_rows(), 512);              // 2 x position_buckets
  EXPECT_FLOAT_EQ(c.cls_dropout, 0.1f);      // absent: hidden_dropout_prob
  EXPECT_EQ(c.pooler_act, PoolerAct::Gelu);
  EXPECT_EQ(c.num_labels(), 2);
  EXPECT_FLOAT_EQ(c.attention().scale(), 1.0f / std::sqrt(64.0f * 3.0f));
  nlohmann::json j = v3_base();
  j["pos_att_type"] = {"c2p"};
  j["pooler_hidden_act"] = "tanh";
  j["cls_dropout"] = 0.3;
  const DebertaConfig d = DebertaConfig::from_json(j, "config.json");
  EXPECT_TRUE(d.c2p);
  EXPECT_FALSE(d.p2c);
  EXPECT_EQ(d.pooler_act, PoolerAct::Tanh);
  EXPECT_FLOAT_EQ(d.cls_dropout, 0.3f);
  EXPECT_FLOAT_EQ(d.attention().scale(), 1.0f / std::sqrt(64.0f * 2.0f));
}

TEST(DebertaConfig, RefusesWhatItDoesNotRunNamingFileAndKey) {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"relative_attention", false},
      {"pos_att_type", "p2c|p2p"},
      {"conv_kernel_size", 3},
      {"embedding_size", 128},
      {"position_buckets", 1},
      {"hidden_act", "relu"},
      {"pad_token_id", 128100},
  };
  for (const auto& [key, value] : cases) {
    nlohmann::json j = v3_base();
    j[key] = value;
    try {
      DebertaConfig::from_json(j, "dir/config.json");
      ADD_FAILURE() << key << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("dir/config.json"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(key).substr(0, 8)), std::string::npos) << what;
    }
  }
}

TEST(DebertaFamily, RegisteredWithItsNamesSitesAndLabels) {
  nlohmann::json j = v3_base();
  j["num_hidden_layers"] = 2;
  j["id2label"] = {{"0", "contradiction"}, {"1", "neutral"}, {"2", "entailment"}};
  j["custom_key"] = "kept";
  const ModelSpec spec = model_spec_from_json(j, "config.json");
  EXPECT_EQ(spec.info().architecture, "DebertaV2ForSequenceClassification");
  EXPECT_EQ(spec.info().type_vocab_size, 0);
  EXPECT_EQ(spec.num_labels(), 3);
  const std::vector<AdapterSite> sites = spec.backbone().adapter_sites();
  ASSERT_EQ(sites.size(), 13u);  // six per layer, then the pooler's dense
  EXPECT_EQ(sites[1].module, "deberta.encoder.layer.0.attention.self.key_proj");
  EXPECT_EQ(sites[10].module, "deberta.encoder.layer.1.intermediate.dense");
  EXPECT_EQ(sites[10].out, 3072);
  EXPECT_EQ(sites[12].module, "pooler.dense");
  auto has = [](const std::vector<ClassifierModule>& m, const std::string& name) {
    return std::any_of(m.begin(), m.end(), [&](const ClassifierModule& x) { return x.name == name; });
  };
  const std::vector<ClassifierModule> shared = spec.backbone().modules();
  EXPECT_TRUE(has(shared, "deberta.encoder.rel_embeddings"));
  EXPECT_FALSE(has(shared, "deberta.encoder.layer.0.attention.self.pos_key_proj"));
  j["share_att_key"] = false;
  EXPECT_TRUE(has(model_spec_from_json(j, "config.json").backbone().modules(),
                  "deberta.encoder.layer.1.attention.self.pos_key_proj"));
  const nlohmann::json saved = spec.with_num_labels(2).to_json();
  EXPECT_EQ(saved["custom_key"], "kept");
  EXPECT_EQ(saved["id2label"]["1"], "LABEL_1");
  EXPECT_EQ(saved["architectures"][0], "DebertaV2ForSequenceClassification");
  EXPECT_EQ(saved["position_buckets"], 256);
}

}  // namespace
}  // namespace ftune::test
