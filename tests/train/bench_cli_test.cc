// `ftune bench` on the CPU with a tiny BERT: every switch is listed (run, or with the reason it
// cannot run here), each variant's own summary shows its setting took effect, repeats and
// --only shape the report, overrides apply as in `ftune train`, the loss difference of a switch
// that changes numerics is reported, nothing but the report is written, and a bad --only name is
// a usage error listing the valid ones.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSwitches = {"precision", "packing",       "tf32",
                                            "attention", "cuda_graphs",   "padding",
                                            "checkpointing", "micro_batch", "prefetch",
                                            "threads"};

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 96, 1);
    write_pair_task(tmp_.path() + "/val.jsonl", 16, 2);
    config_ = write_train_yaml(tmp_.path(), "run", model_,
                               "  memory_budget: 1GiB\n  learning_rate: 3.0e-3\n  warmup_ratio: 0\n");
  }
  // Runs the bench; the report it wrote with --json (stdout holds the table).
  nlohmann::json bench(const std::string& args, CliResult* out = nullptr) {
    const std::string json = tmp_.path() + "/report.json";
    const CliResult r = run_ftune("bench --config " + config_ + " --json " + json + " " + args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (out) *out = r;
    std::ifstream in(json);
    return nlohmann::json::parse(in, nullptr, false);
  }
  static const nlohmann::json& variant(const nlohmann::json& report, const std::string& name) {
    for (const auto& v : report["variants"])
      if (v["name"] == name) return v;
    ADD_FAILURE() << "no variant " << name;
    static const nlohmann::json none;
    return none;
  }
  static nlohmann::json setting(const nlohmann::json& v, const std::string& name) {
    return v["summary"]["settings"][name]["value"];
  }
  TempDir tmp_;
  std::string model_, config_;
};

TEST_F(BenchCli, ListsEverySwitchAndEachVariantRanWithItsSetting) {
  CliResult out;
  const nlohmann::json r = bench("--steps 2 --warmup 1 --repeats 2", &out);
  ASSERT_TRUE(r.is_object());
  std::set<std::string> names;
  for (const auto& v : r["variants"]) names.insert(v["name"].get<std::string>());
  EXPECT_EQ(r["variants"][0]["name"], "default");
  EXPECT_EQ(names.size(), kSwitches.size() + 1);
  for (const std::string& s : kSwitches) {
    EXPECT_TRUE(names.count(s)) << s;
    EXPECT_NE(out.output.find(s), std::string::npos) << "the table lacks " << s;
  }
  EXPECT_EQ(r["steps"], 2);
  EXPECT_EQ(r["warmup"], 1);
  EXPECT_EQ(r["repeats"], 2);

  const nlohmann::json& def = variant(r, "default");
  ASSERT_EQ(def["status"], "ran");
  EXPECT_EQ(def["runs"].size(), 2u);
  EXPECT_EQ(setting(def, "precision"), "fp32");
  EXPECT_EQ(setting(def, "packing"), true);  // auto packs on the CPU for BERT
  EXPECT_EQ(setting(def, "checkpointing"), false);
  EXPECT_EQ(setting(def, "threads"), 2);
  EXPECT_EQ(setting(def, "prefetch"), 4);
  EXPECT_GT(def["samples_per_s"].get<double>(), 0);
  EXPECT_GT(def["tokens_per_s"].get<double>(), def["samples_per_s"].get<double>());
  EXPECT_GT(def["planned_bytes"].get<double>(), 0);
  EXPECT_GT(def["measured_bytes"].get<double>(), 0.9 * def["planned_bytes"].get<double>());
  EXPECT_TRUE(def["mfu"].is_null());  // no peak for a CPU
  EXPECT_FALSE(def.contains("speedup_of_default"));

  // Each variant that ran: its own summary (what the strategy really built) shows the flip.
  const auto ran = [&](const std::string& name) -> const nlohmann::json& {
    const nlohmann::json& v = variant(r, name);
    EXPECT_EQ(v["status"], "ran") << name << ": " << v.dump();
    EXPECT_EQ(v["runs"].size(), 2u) << name;
    EXPECT_GT(v["speedup_of_default"]["median"].get<double>(), 0) << name;
    EXPECT_LE(v["speedup_of_default"]["min"].get<double>(),
              v["speedup_of_default"]["max"].get<double>());
    return v;
  };
  const nlohmann::json& bf16 = ran("precision");
  EXPECT_EQ(setting(bf16, "precision"), "bf16");
  EXPECT_EQ(bf16["summary"]["settings"]["precision"]["text"], "bf16");
  // bf16 changes numerics: its price is reported, small but not nothing.
  EXPECT_NE(bf16["loss_vs_default"].get<double>(), 0.0) << bf16["runs"].dump() << def["runs"].dump();
  EXPECT_LT(std::abs(bf16["loss_vs_default"].get<double>()), 2e-2);
  const nlohmann::json& padded = ran("packing");
  EXPECT_EQ(padded["summary"]["packing"]["on"], false);
  EXPECT_LT(std::abs(padded["loss_vs_default"].get<double>()), 1e-5);
  const nlohmann::json& ckpt = ran("checkpointing");
  EXPECT_EQ(ckpt["summary"]["gradient_checkpointing"], true);
  EXPECT_EQ(ckpt["loss_vs_default"].get<double>(), 0.0);  // recomputation is bit-identical
  EXPECT_EQ(ran("micro_batch")["summary"]["micro_batch"], 8);  // gcd(16, 8) rows x 2
  EXPECT_EQ(ran("micro_batch")["summary"]["gradient_accumulation"], 2);
  EXPECT_EQ(setting(ran("prefetch"), "prefetch"), 1);
  EXPECT_EQ(setting(ran("threads"), "threads"), 1);

  // What cannot run on a CPU is listed with the reason, not hidden.
  EXPECT_EQ(variant(r, "tf32")["status"], "same as default");
  EXPECT_NE(variant(r, "tf32")["reason"].get<std::string>().find("the CPU has no TF32"),
            std::string::npos);
  for (const char* name : {"attention", "cuda_graphs"}) {
    EXPECT_EQ(variant(r, name)["status"], "not run") << name;
    EXPECT_NE(variant(r, name)["reason"].get<std::string>().find("CUDA device"),
              std::string::npos)
        << variant(r, name).dump();
  }
  EXPECT_EQ(variant(r, "padding")["status"], "not applicable");
  EXPECT_NE(out.output.find("the CPU has no TF32"), std::string::npos);

  // Nothing but the report: no run directory.
  EXPECT_FALSE(fs::exists(tmp_.path() + "/run"));
}

TEST_F(BenchCli, OnlyRepeatsAndOverrides) {
  // An override as `ftune train` takes it: the default runs with checkpointing on, so the
  // checkpointing variant turns it off; padded batches make the padding switch applicable.
  const nlohmann::json r = bench(
      "--steps 1 --warmup 0 --repeats 1 --only checkpointing,padding "
      "training.gradient_checkpointing=on data.packing=off training.pad_to_multiple_of=8");
  ASSERT_TRUE(r.is_object());
  ASSERT_EQ(r["variants"].size(), 3u);
  EXPECT_EQ(r["variants"][1]["name"], "checkpointing");
  EXPECT_EQ(r["variants"][2]["name"], "padding");
  EXPECT_EQ(r["warmup"], 0);
  EXPECT_EQ(r["repeats"], 1);
  const nlohmann::json& def = variant(r, "default");
  EXPECT_EQ(def["runs"].size(), 1u);
  EXPECT_EQ(setting(def, "checkpointing"), true);
  EXPECT_EQ(def["summary"]["pad_to_multiple_of"], 8);
  const nlohmann::json& off = variant(r, "checkpointing");
  EXPECT_EQ(off["status"], "ran");
  EXPECT_EQ(off["setting"], "off");
  EXPECT_EQ(off["default_setting"], "on");
  EXPECT_EQ(off["summary"]["gradient_checkpointing"], false);
  EXPECT_EQ(variant(r, "padding")["summary"]["pad_to_multiple_of"], 1);
}

TEST_F(BenchCli, BadOnlyNameListsTheValidOnes) {
  const CliResult r = run_ftune("bench --config " + config_ + " --only packing,fp8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'fp8' is not a variant"), std::string::npos) << r.output;
  for (const std::string& s : kSwitches) EXPECT_NE(r.output.find(s), std::string::npos) << s;
  EXPECT_EQ(r.output.find("bench: default"), std::string::npos) << "ran before refusing";
}

}  // namespace
}  // namespace ftune::test
