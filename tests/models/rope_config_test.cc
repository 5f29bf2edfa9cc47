// RoPE settings of every type ftune reads against transformers' ROPE_INIT_FUNCTIONS
// (tests/fixtures/rope/cases.json, tools/make_rope_fixtures.py): the inverse frequencies and the
// attention scaling from each config.json, longrope's short and long sets, and Gemma 3's two layer
// types; then the errors of settings ftune cannot follow.
#include <gtest/gtest.h>

#include <cmath>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/decoder/decoder_config.h"

namespace ftune::test {
namespace {

const nlohmann::json& cases() {
  static const nlohmann::json j = io::read_json_file(fixtures_dir() + "/rope/cases.json")["cases"];
  return j;
}

// Within 2 ulps: powf here and torch's vectorised pow may round the last bit apart.
void expect_table(const RopeConfig& r, int64_t head_dim, bool long_seq, const nlohmann::json& want,
                  const std::string& what) {
  const std::vector<float> got = r.inv_freq(head_dim, long_seq);
  const auto& inv = want["inv_freq"];
  ASSERT_EQ(got.size(), inv.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = inv[i].get<double>();
    EXPECT_LE(std::abs(got[i] - w), 2.5e-7 * std::abs(w)) << what << " [" << i << "]";
  }
  EXPECT_EQ(r.attention_scaling(), static_cast<float>(want["attention_scaling"].get<double>())) << what;
}

TEST(RopeConfig, EveryTypeMatchesTransformers) {
  int checked = 0;
  for (const auto& [name, c] : cases().items()) {
    const DecoderConfig d = DecoderConfig::from_json(c["config"], name + "/config.json");
    if (c.contains("layer_types")) {
      expect_table(d.rope, d.head_dim, false, c["layer_types"]["full_attention"], name + " full");
      expect_table(d.local_rope, d.head_dim, false, c["layer_types"]["sliding_attention"],
                   name + " sliding");
      checked += 2;
      continue;
    }
    expect_table(d.rope, d.head_dim, false, c, name);
    ++checked;
    if (c.contains("long")) {
      expect_table(d.rope, d.head_dim, true, c["long"], name + " long");
      ++checked;
      const int64_t orig = d.rope.original_max_positions;
      EXPECT_FALSE(d.rope.uses_long_factors(orig));
      EXPECT_TRUE(d.rope.uses_long_factors(orig + 1));
    }
  }
  EXPECT_EQ(checked, 15);
}

TEST(RopeConfig, SettingsFtuneCannotFollowNameTheKey) {
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    std::string message;
  } bad[] = {
      {"longrope", [](nlohmann::json& j) { j["rope_parameters"]["short_factor"].erase(0); },
       "short_factor and long_factor"},
      {"longrope", [](nlohmann::json& j) { j["rope_parameters"].erase("long_factor"); },
       "'long_factor'"},
      {"yarn", [](nlohmann::json& j) { j["rope_parameters"]["factor"] = -1; }, "'factor'"},
      {"yarn", [](nlohmann::json& j) { j["rope_parameters"]["beta_fast"] = "x"; }, "beta_fast"},
      {"dynamic", [](nlohmann::json& j) { j["rope_parameters"].erase("factor"); }, "'factor'"},
      {"linear", [](nlohmann::json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; },
       "partial_rotary_factor 0.5"},
      {"gemma3_linear",
       [](nlohmann::json& j) { j["rope_parameters"]["sliding_attention"]["rope_type"] = "su"; },
       "rope_parameters.sliding_attention: rope type 'su'"},
  };
  for (const Case& c : bad) {
    nlohmann::json j = cases()[c.name]["config"];
    c.edit(j);
    try {
      DecoderConfig::from_json(j, "cfg.json");
      ADD_FAILURE() << c.message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ftune::test
