// Label names in config.json exactly as transformers writes and reads them: ftune reads the
// config.json transformers wrote for label names that look like integers (tools/
// make_label_fixtures.py) as those names in id order, writes id2label / label2id back unchanged,
// and refuses an id2label that is not a map of the ids 0..K-1, each once.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/bert/encoder_config.h"
#include "test_util.h"

namespace ftune::test {
namespace {

TEST(LabelConfig, NumericNamesRoundTripWithTransformers) {
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {"numeric_1_2", {"1", "2"}}, {"minus_one_zero_one", {"-1", "0", "1"}}};
  for (const auto& [name, labels] : cases) {
    const std::string path = fixtures_dir() + "/labels/" + name + ".config.json";
    const nlohmann::json theirs = io::read_json_file(path);
    const EncoderConfig c = EncoderConfig::from_json(theirs, path);
    EXPECT_EQ(c.id2label, labels) << name;
    const nlohmann::json ours = c.to_json();
    EXPECT_EQ(ours["id2label"], theirs["id2label"]) << name;
    EXPECT_EQ(ours["label2id"], theirs["label2id"]) << name;
  }
}

TEST(LabelConfig, Id2labelMustMapEveryIdOnce) {
  const std::string path = fixtures_dir() + "/labels/numeric_1_2.config.json";
  const nlohmann::json good = io::read_json_file(path);
  for (const nlohmann::json& bad :
       {nlohmann::json{{"0", "a"}, {"00", "b"}}, nlohmann::json{{"0", "a"}, {"2", "b"}},
        nlohmann::json{{"1", "a"}, {"+0", "b"}}, nlohmann::json{{"0", "a"}, {"1", 7}}}) {
    nlohmann::json j = good;
    j["id2label"] = bad;
    try {
      EncoderConfig::from_json(j, path);
      ADD_FAILURE() << bad.dump() << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("id2label must map each id 0..1 to a label name"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace ftune::test
