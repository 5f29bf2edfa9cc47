// Hostile PEFT adapter directories (fuzz/fuzz_peft_adapter): adapter_config.json values that made
// the loader throw a std::regex_error, backtrack for ever, build adapters of 2^40 rank or cast an
// unbounded alpha to float are refused with an InputError naming the file, as `ftune export` meets
// them; the YAML `peft:` section gets the same protection. Non-finite weights (NaN or Inf in the
// base checkpoint or the adapter) are refused at load naming the tensor and the file, a merge
// that overflows (lora_alpha 1e38) is refused naming the weight, and PEFT's "all-linear"
// shorthand is read in any case, as PEFT lowercases it.
#include <cstdint>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "golden_fixture.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/bert/bert_checkpoint.h"
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

// A copy of the safetensors file `from` at `to` with element 3 of tensor `name` set to `value`.
void write_poisoned_copy(const std::string& from, const std::string& to, const std::string& name,
                         float value) {
  const io::SafetensorsFile f = io::SafetensorsFile::open(from);
  std::vector<HostTensor> held;
  held.reserve(f.entries().size());
  std::vector<io::SafetensorsTensor> out;
  bool found = false;
  for (const io::SafetensorsEntry& e : f.entries()) {
    held.push_back(f.read(e.name));
    if (e.name == name) {
      ASSERT_EQ(held.back().view().dtype, DType::F32);
      held.back().data<float>()[3] = value;
      found = true;
    }
    out.push_back({e.name, held.back().view(), {}});
  }
  ASSERT_TRUE(found) << name;
  io::write_safetensors(to, out);
}

// The classifier of `base` with `adapter` loaded, as `ftune export --merge` builds it.
struct AdaptedModel {
  AdaptedModel(const std::string& base, const std::string& adapter) {
    ClassifierOptions o;
    o.max_batch = 1;
    o.max_seq = 1;
    o.training = false;
    o.adapters = read_peft_adapter_config(adapter);
    LoadOptions lo;
    lo.reinit_mismatched_head = true;
    model = std::make_unique<SequenceClassifier>(load_model_spec(base, lo), o);
    ArenaPlan plan;
    model->add_to_plan(plan);
    arena = std::make_unique<Arena>(Device::cpu(), std::move(plan));
    model->bind(*arena);
    load_model_weights(*model, base, lo);
    load_peft_adapter(*model, adapter);
  }
  std::unique_ptr<SequenceClassifier> model;
  std::unique_ptr<Arena> arena;
};

std::string error_of_loading(const std::string& base, const std::string& adapter) {
  try {
    AdaptedModel m(base, adapter);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(PeftFiles, NonFiniteAdapterTensorIsRefusedAtLoad) {
  TempDir tmp;
  const std::string base = GoldenCase::load("bert_pair").model_dir;
  const std::string adapter = adapter_with(tmp, "r", 4);  // a copy, config unchanged
  const std::string weights = adapter + "/adapter_model.safetensors";
  const std::string key =
      "base_model.model.bert.encoder.layer.0.attention.self.query.lora_B.weight";
  ASSERT_EQ(error_of_loading(base, adapter), "accepted");
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    write_poisoned_copy(fixtures_dir() + "/peft/bert_lora/adapter/adapter_model.safetensors",
                        weights, key, bad);
    const std::string e = error_of_loading(base, adapter);
    EXPECT_NE(e.find(key), std::string::npos) << e;
    EXPECT_NE(e.find("adapter_model.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find(std::isnan(bad) ? "NaN" : "infinite"), std::string::npos) << e;
  }
}

TEST(PeftFiles, NonFiniteBaseWeightIsRefusedAtLoad) {
  TempDir tmp;
  const std::string from = GoldenCase::load("bert_pair").model_dir;
  const std::string base = tmp.path() + "/base";
  fs::copy(from, base, fs::copy_options::recursive);
  const std::string key = "bert.encoder.layer.1.output.dense.weight";
  write_poisoned_copy(from + "/model.safetensors", base + "/model.safetensors", key, std::nanf(""));
  const std::string e = error_of_loading(base, fixtures_dir() + "/peft/bert_lora/adapter");
  EXPECT_NE(e.find(key), std::string::npos) << e;
  EXPECT_NE(e.find(base + "/model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("NaN"), std::string::npos) << e;
}

// lora_alpha 1e38 is a finite float, but the merged weights are not (or are ~1e36): refused,
// naming the weight, rather than saved.
TEST(PeftFiles, MergeThatOverflowsIsRefused) {
  TempDir tmp;
  const std::string base = GoldenCase::load("bert_pair").model_dir;
  AdaptedModel m(base, adapter_with(tmp, "lora_alpha", 1e38));
  try {
    merge_adapters(*m.model);
    ADD_FAILURE() << "merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(".weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lora_alpha"), std::string::npos) << e.what();
  }
}

// PEFT compares a target_modules string lowercased with "all-linear" (tuners_utils.py,
// _maybe_include_all_linear_layers), so "ALL-LINEAR" adapts every linear layer as "all-linear".
TEST(PeftFiles, AllLinearInAnyCase) {
  TempDir tmp;
  const AdapterConfig lower =
      read_peft_adapter_config(adapter_with(tmp, "target_modules", "all-linear"));
  const AdapterConfig upper =
      read_peft_adapter_config(adapter_with(tmp, "target_modules", "ALL-LINEAR"));
  EXPECT_EQ(upper.target_modules, lower.target_modules);
  EXPECT_TRUE(upper.target_regex.empty());
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
