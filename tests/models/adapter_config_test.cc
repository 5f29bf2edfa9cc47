// The `peft:` section: defaults, PEFT's module-name matching, and errors naming the key.
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/adapter_config.h"
#include "models/bert/bert_family.h"

namespace ftune::test {
namespace {

AdapterConfig parse(const std::string& yaml) {
  return parse_adapter_config(YAML::Load(yaml), "train.yaml: peft");
}

std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(AdapterConfig, ReadsEveryKeyAndScales) {
  const AdapterConfig c = parse(
      "{method: dora, r: 16, alpha: 32, dropout: 0, target_modules: [query, value], "
      "use_rslora: true, modules_to_save: [pooler]}");
  EXPECT_TRUE(c.dora());
  EXPECT_EQ(c.r, 16);
  EXPECT_FLOAT_EQ(c.scaling(), 32.0f / 4.0f);  // rsLoRA: alpha / sqrt(r)
  EXPECT_TRUE(c.trains_pooler());
  EXPECT_EQ(c.modules_to_save.front(), "classifier");  // SEQ_CLS always trains the head
  EXPECT_FLOAT_EQ(parse("{method: lora, r: 8, alpha: 16}").scaling(), 2.0f);
  EXPECT_FALSE(parse("").enabled());
  EXPECT_TRUE(parse("lora").enabled());
}

TEST(AdapterConfig, MatchesModuleNamesAsPeft) {
  const AdapterConfig c = parse("{method: lora, target_modules: [query, output.dense]}");
  EXPECT_TRUE(c.targets("bert.encoder.layer.0.attention.self.query"));
  EXPECT_FALSE(c.targets("bert.encoder.layer.0.attention.self.key"));
  // PEFT's suffix rule: "output.dense" also matches attention.output.dense.
  EXPECT_TRUE(c.targets("bert.encoder.layer.3.attention.output.dense"));
  EXPECT_TRUE(c.targets("roberta.encoder.layer.3.output.dense"));
  const AdapterConfig all = parse("{method: lora, target_modules: all-linear}");
  EXPECT_TRUE(all.targets("bert.encoder.layer.1.intermediate.dense"));
  const AdapterConfig re =
      parse(R"({method: lora, target_modules: '.*layer\.1\.attention\.self\.(query|value)'})");
  EXPECT_TRUE(re.targets("bert.encoder.layer.1.attention.self.value"));
  EXPECT_FALSE(re.targets("bert.encoder.layer.0.attention.self.value"));
  // "intermediate" names the BertIntermediate container, not its dense layer (PEFT refuses it).
  EXPECT_FALSE(parse("{method: lora, target_modules: [intermediate]}")
                   .targets("bert.encoder.layer.0.intermediate.dense"));
}

// The issue: PEFT's suffix rule adapts bert.pooler.dense with "dense" and with all-linear (any
// case); modules_to_save (pooler; SEQ_CLS's classifier and score) take no adapter.
TEST(AdapterConfig, PoolerAndHeadAsPeft) {
  EXPECT_TRUE(parse("{method: lora, target_modules: [query, value, dense]}")
                  .targets("bert.pooler.dense"));
  EXPECT_TRUE(parse("{method: lora, target_modules: All-Linear}").targets("bert.pooler.dense"));
  EXPECT_TRUE(parse("{method: lora, target_modules: '.*dense'}").targets("bert.pooler.dense"));
  EXPECT_FALSE(parse("{method: lora, target_modules: [query]}").targets("bert.pooler.dense"));
  const AdapterConfig saved =
      parse("{method: lora, target_modules: [dense], modules_to_save: [pooler]}");
  EXPECT_FALSE(saved.targets("bert.pooler.dense"));
  EXPECT_TRUE(saved.targets("bert.encoder.layer.0.output.dense"));
  const AdapterConfig dense = parse("{method: lora, target_modules: [dense, out_proj]}");
  EXPECT_FALSE(dense.targets("classifier.dense"));  // RoBERTa's head: in modules_to_save
  EXPECT_FALSE(dense.targets("classifier.out_proj"));
  EXPECT_TRUE(dense.saved_whole("classifier.dense"));
  EXPECT_FALSE(dense.saved_whole("bert.encoder.layer.0.output.dense"));
}

// What PEFT 0.21.2 adapts on the engine fixtures' 2-layer classifiers (tools/make_peft_fixtures.py
// prints the same lists), and the targets it refuses.
TEST(AdapterConfig, ResolvesTargetsOnTheModuleTreeAsPeft) {
  const auto bert = bert_classifier_modules(true, 2), roberta = bert_classifier_modules(false, 2);
  auto resolve = [](const std::string& yaml, const std::vector<ClassifierModule>& tree) {
    return resolve_target_modules(parse(yaml), tree, "peft");
  };
  auto error = [&](const std::string& yaml, const std::vector<ClassifierModule>& tree) {
    try {
      resolve(yaml, tree);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto dense = resolve("{method: lora, target_modules: [dense]}", bert);
  EXPECT_EQ(dense, (std::vector<std::string>{"bert.encoder.layer.0.attention.output.dense",
                                             "bert.encoder.layer.0.intermediate.dense",
                                             "bert.encoder.layer.0.output.dense",
                                             "bert.encoder.layer.1.attention.output.dense",
                                             "bert.encoder.layer.1.intermediate.dense",
                                             "bert.encoder.layer.1.output.dense",
                                             "bert.pooler.dense"}));
  EXPECT_EQ(resolve("{method: lora, target_modules: all-linear}", bert).size(), 2u * 6 + 1);
  EXPECT_EQ(resolve("{method: lora, target_modules: all-linear}", roberta).size(), 2u * 6);
  EXPECT_EQ(resolve("{method: lora, target_modules: [dense]}", roberta).size(), 2u * 3);
  EXPECT_EQ(resolve("{method: lora, target_modules: [pooler.dense]}", bert),
            (std::vector<std::string>{"bert.pooler.dense"}));
  EXPECT_NE(error("{method: lora, target_modules: [intermediate]}", bert)
                .find("peft: target_modules matches 'bert.encoder.layer.0.intermediate', which is "
                      "not a linear layer; PEFT refuses it too"),
            std::string::npos);
  EXPECT_NE(error("{method: lora, target_modules: '.*pooler.*'}", bert).find("'bert.pooler'"),
            std::string::npos);
  EXPECT_NE(error("{method: lora, target_modules: [query, word_embeddings]}", bert)
                .find("bert.embeddings.word_embeddings, an embedding"),
            std::string::npos);
  EXPECT_NE(error("{method: lora, target_modules: [query, classifier]}", bert)
                .find("entry 'classifier' matches no module that can take an adapter"),
            std::string::npos);
  EXPECT_NE(error("{method: lora, target_modules: [query, pooler.dense]}", roberta)
                .find("entry 'pooler.dense' matches no module"),
            std::string::npos);
}

TEST(AdapterConfig, ErrorsNameTheKey) {
  EXPECT_NE(
      error_of("{method: lora, target_modules: [qury]}").find("unknown module pattern 'qury'"),
      std::string::npos);
  EXPECT_NE(error_of("{method: lora, r: 0}").find("train.yaml: peft.r must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, alpha: -1}").find("peft.alpha must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, dropout: 1.0}").find("peft.dropout must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, rank: 4}").find("unknown key 'rank'"), std::string::npos);
  EXPECT_NE(error_of("{method: ia3}").find("must be none, lora or dora"), std::string::npos);
  EXPECT_NE(error_of("{method: lora, r: two}").find("peft.r must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, modules_to_save: [decoder]}").find("unknown module 'decoder'"),
            std::string::npos);
  EXPECT_FLOAT_EQ(parse("{method: dora, dropout: 0.1}").dropout, 0.1);  // as PEFT: supported
}

TEST(AdapterConfig, GradientCheckpointingSwitch) {
  EXPECT_EQ(parse_gradient_checkpointing(YAML::Load("on"), "k"), GradientCheckpointing::On);
  EXPECT_EQ(parse_gradient_checkpointing(YAML::Load("false"), "k"), GradientCheckpointing::Off);
  EXPECT_EQ(parse_gradient_checkpointing(YAML::Load("auto"), "k"), GradientCheckpointing::Auto);
  EXPECT_THROW(parse_gradient_checkpointing(YAML::Load("sometimes"), "k"), InputError);
}

}  // namespace
}  // namespace ftune::test
