// The `peft:` section: defaults, PEFT's module-name matching, and errors naming the key.
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/adapter_config.h"

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
  EXPECT_TRUE(parse("{method: lora, target_modules: [intermediate]}")
                  .targets("bert.encoder.layer.0.intermediate.dense"));
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
  EXPECT_NE(error_of("{method: dora, dropout: 0.1}").find("DoRA with dropout"), std::string::npos);
}

TEST(AdapterConfig, GradientCheckpointingSwitch) {
  EXPECT_EQ(parse_gradient_checkpointing(YAML::Load("on"), "k"), GradientCheckpointing::On);
  EXPECT_EQ(parse_gradient_checkpointing(YAML::Load("false"), "k"), GradientCheckpointing::Off);
  EXPECT_EQ(parse_gradient_checkpointing(YAML::Load("auto"), "k"), GradientCheckpointing::Auto);
  EXPECT_THROW(parse_gradient_checkpointing(YAML::Load("sometimes"), "k"), InputError);
}

}  // namespace
}  // namespace ftune::test
