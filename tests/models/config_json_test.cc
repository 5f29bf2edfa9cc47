// Hostile config.json values (fuzz/fuzz_model_config): sizes and floats a downloaded file may hold
// are refused with an InputError naming the key, before they overflow the parameter table, a float
// cast (undefined behaviour) or an allocation; id2label keys must be exactly the ids.
#include <gtest/gtest.h>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/bert/classification_head.h"
#include "models/bert/encoder.h"
#include "models/bert/encoder_config.h"

namespace ftune::test {
namespace {

nlohmann::json fixture_config() {
  return io::read_json_file(GoldenCase::load("bert_pair").model_dir + "/config.json");
}

void expect_refused(const nlohmann::json& j, const std::vector<std::string>& parts) {
  try {
    EncoderConfig::from_json(j, "model/config.json");
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const InputError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// The BERT family's variants are rows of one table (models/bert/encoder_config.cc): each row's
// model_type is read as its variant, saved under its own name and architecture, and built by the
// family registry (which registers every row), so a variant in data touches only that table.
TEST(ConfigJson, EveryBertVariantRowIsReadSavedAndRegistered) {
  const std::vector<std::string>& types = bert_model_types();
  ASSERT_EQ(types, (std::vector<std::string>{"bert", "roberta", "xlm-roberta"}));
  for (const std::string& type : types) {
    nlohmann::json j = fixture_config();
    j["model_type"] = type;
    const EncoderConfig c = EncoderConfig::from_json(j, "model/config.json");
    EXPECT_EQ(c.model_type(), type);
    EXPECT_EQ(c.roberta_like(), type != "bert") << type;
    EXPECT_EQ(c.to_json()["model_type"], type);
    EXPECT_EQ(c.to_json()["architectures"][0], c.architecture()) << type;
    EXPECT_NE(c.architecture(), "?") << type;
    EXPECT_EQ(model_spec_from_json(j, "model/config.json").info().model_type, type);
  }
  nlohmann::json j = fixture_config();
  j["model_type"] = "camembert";
  expect_refused(j, {"model/config.json", "'camembert'", "expected bert, roberta or xlm-roberta"});
}

TEST(ConfigJson, FloatsMustFitAFloat) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, double>>{
           {"layer_norm_eps", 1e300},
           {"initializer_range", 1e39},
           {"initializer_range", -0.02},
           {"hidden_dropout_prob", 1e300},
           // Below 1 as a double, 1.0f as a float: a keep probability of 0.
           {"attention_probs_dropout_prob", 0.99999999999},
           {"classifier_dropout", 0.999999999}}) {
    nlohmann::json j = fixture_config();
    j[key] = value;
    expect_refused(j, {"model/config.json", "'" + key + "'"});
  }
}

TEST(ConfigJson, SizesAreBounded) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{
           {"vocab_size", int64_t{1} << 40},
           {"max_position_embeddings", int64_t{1} << 31},
           {"type_vocab_size", int64_t{1} << 33},
           {"num_hidden_layers", 100000},
           {"num_labels", 2000000}}) {
    nlohmann::json j = fixture_config();
    j.erase("id2label");
    j[key] = value;
    expect_refused(j, {"model/config.json", key});
  }
  // Each size within 32 bits, but together 2^31 x 2^20 parameters: refused before the parameter
  // table (whose offsets would overflow int64) is built.
  nlohmann::json j = fixture_config();
  j["vocab_size"] = INT32_MAX;
  j["hidden_size"] = 1 << 20;
  j["num_attention_heads"] = 1;
  expect_refused(j, {"model/config.json", "parameters", "vocab_size 2147483647"});
}

TEST(ConfigJson, LargestAcceptedConfigBuildsItsParameterTable) {
  nlohmann::json j = fixture_config();
  j["num_hidden_layers"] = 4096;
  const EncoderConfig c = EncoderConfig::from_json(j, "config.json");
  ParamTable t;
  add_encoder_params(c, t);
  add_head_params(c, t);
  EXPECT_GT(t.total(), 4096 * 32 * 32);
}

TEST(ConfigJson, Id2LabelKeysMustBeExactlyTheIds) {
  for (const nlohmann::json& m :
       {nlohmann::json{{"1", "neg"}, {"01", "pos"}},  // id 0 was left unnamed
        nlohmann::json{{"0", "neg"}, {" 1", "pos"}}, nlohmann::json{{"0", "neg"}, {"1x", "pos"}},
        nlohmann::json{{"0", "neg"}, {"-1", "pos"}}, nlohmann::json{{"0", "neg"}, {"1", 1}}}) {
    nlohmann::json j = fixture_config();
    j["id2label"] = m;
    expect_refused(j, {"model/config.json", "id2label"});
  }
  nlohmann::json j = fixture_config();
  j["id2label"] = {{"1", "pos"}, {"0", "neg"}};
  EXPECT_EQ(EncoderConfig::from_json(j, "config.json").id2label,
            (std::vector<std::string>{"neg", "pos"}));
}

}  // namespace
}  // namespace ftune::test
