// Hostile PEFT adapter directories (fuzz/fuzz_peft_adapter): adapter_config.json values that made
// the loader throw a std::regex_error, backtrack for ever, build adapters of 2^40 rank or cast an
// unbounded alpha to float are refused with an InputError naming the file, as `ftune export` meets
// them; the YAML `peft:` section gets the same protection.
#include <cstdint>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "models/hf_checkpoint.h"
#include "models/peft_adapter.h"
#include "models/sequence_classifier.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

// A copy of the bert_lora fixture adapter whose adapter_config.json has `key` set to `value`.
std::string adapter_with(const TempDir& tmp, const std::string& key, const nlohmann::json& value) {
  const std::string from = fixtures_dir() + "/peft/bert_lora/adapter";
  const std::string to = tmp.path() + "/adapter";
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  nlohmann::json c = io::read_json_file(to + "/adapter_config.json");
  c[key] = value;
  io::write_json_atomic(to + "/adapter_config.json", c);
  return to;
}

// read_peft_adapter_config, then the classifier built with those adapters on the fixture base
// model (what `ftune export --merge` does before it allocates anything).
void build_with_adapter(const std::string& adapter) {
  ClassifierOptions o;
  o.max_batch = 1;
  o.max_seq = 1;
  o.training = false;
  o.adapters = read_peft_adapter_config(adapter);
  SequenceClassifier model(load_model_config(GoldenCase::load("bert_pair").model_dir), o);
}

void expect_refused(const std::string& adapter, const std::vector<std::string>& parts) {
  try {
    build_with_adapter(adapter);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got " << e.what();
  }
}

TEST(PeftFiles, InvalidRegexNamesTheFile) {
  TempDir tmp;
  expect_refused(adapter_with(tmp, "target_modules", "("),
                 {"adapter_config.json: target_modules", "invalid regex"});
}

// std::regex backtracked for minutes on this pattern against every module name (a hang of
// `ftune export`); PCRE2 finds at once that no name can match.
TEST(PeftFiles, BacktrackingRegexDoesNotHang) {
  TempDir tmp;
  const auto t0 = std::chrono::steady_clock::now();
  expect_refused(adapter_with(tmp, "target_modules", "(.*)*x"), {"matches no"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // A regex that matches still selects modules as PEFT's re.fullmatch does.
  const std::string ok = adapter_with(tmp, "target_modules", R"(.*\.layer\.1\..*\.(query|value))");
  ClassifierOptions o;
  o.training = false;
  o.adapters = read_peft_adapter_config(ok);
  SequenceClassifier model(load_model_config(GoldenCase::load("bert_pair").model_dir), o);
  EXPECT_NE(model.adapter_params().find("bert.encoder.layer.1.attention.self.query.lora_A.weight"),
            nullptr);
  EXPECT_EQ(model.adapter_params().find("bert.encoder.layer.0.attention.self.query.lora_A.weight"),
            nullptr);
  EXPECT_EQ(model.adapter_params().specs().size(), 4u);
}

TEST(PeftFiles, RankAndAlphaAreBounded) {
  TempDir tmp;
  expect_refused(adapter_with(tmp, "r", int64_t{1} << 40), {"adapter_config.json", "r must be"});
  // Within 32 bits, but adapters of over 2^40 parameters even on the tiny fixture model.
  expect_refused(adapter_with(tmp, "r", int64_t{INT32_MAX}), {"rank 2147483647", "2^40"});
  expect_refused(adapter_with(tmp, "lora_alpha", 1e300), {"adapter_config.json", "lora_alpha"});
}

TEST(PeftFiles, YamlSectionIsProtectedToo) {
  auto error_of = [](const std::string& yaml) -> std::string {
    try {
      parse_adapter_config(YAML::Load(yaml), "train.yaml: peft");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("{method: lora, target_modules: '(.*)*x'}").find("matches no module"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, target_modules: '(['}").find("invalid regex"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, r: 4294967296}").find("peft.r must be at most"),
            std::string::npos);
  EXPECT_NE(error_of("{method: lora, alpha: 1e300}").find("peft.alpha must be a finite float"),
            std::string::npos);
}

}  // namespace
}  // namespace ftune::test
