// `ftune train` end to end through the command line on a tiny model and a synthetic pair task:
// the loss falls, validation accuracy rises, the run directory holds the resolved config,
// metrics.jsonl, summary.json and a model that `ftune predict` loads; bad configs and bad data
// rows fail with exit code 2 and a message naming the key or the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/device.h"
#include "io/tfevents_decoder.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 256, 1);
    write_pair_task(tmp_.path() + "/val.jsonl", 64, 2);
  }
  std::string config(const std::string& extra = "") {
    const std::string path = tmp_.path() + "/config.yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  validation: " << tmp_.path()
                        << "/val.jsonl\n  max_length: 24\n"
                        << "training:\n  epochs: 6\n  batch_size: 16\n  learning_rate: 3.0e-3\n"
                        << "  warmup_ratio: 0.05\n  log_every: 8\n  threads: 2\n"
                        << extra << "output:\n  dir: " << tmp_.path() << "/run\n";
    return path;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(TrainCli, LearnsTheTaskAndWritesARunDirectory) {
  const CliResult r = run_ftune("train --config " + config());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = tmp_.path() + "/run";
  for (const char* f : {"config.yaml", "metrics.jsonl", "summary.json", "model/config.json",
                        "model/model.safetensors", "model/tokenizer.json"})
    EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  std::vector<double> train_losses;
  std::ifstream metrics(run + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] != "train") continue;
    train_losses.push_back(j["loss"].get<double>());
    // Each log interval says how much of it the trainer spent waiting for input.
    ASSERT_TRUE(j.contains("input_wait_fraction")) << line;
    EXPECT_GE(j["input_wait_fraction"].get<double>(), 0.0);
    EXPECT_LE(j["input_wait_fraction"].get<double>(), 1.0);
    EXPECT_FALSE(j.contains("gpu_util_percent")) << "a CPU run has no GPU sampler";
  }
  ASSERT_GE(train_losses.size(), 4u);
  EXPECT_LT(train_losses.back(), 0.5 * train_losses.front());
  const auto summary = nlohmann::json::parse(std::ifstream(run + "/summary.json"));
  EXPECT_EQ(summary["steps"], 96);
  EXPECT_GT(summary["final_eval"]["accuracy"].get<double>(), 0.9);
  EXPECT_GT(summary["train_samples_per_s"].get<double>(), 0.0);
  EXPECT_EQ(summary["labels"], nlohmann::json::array({"0", "1"}));

  const CliResult p = run_ftune("predict --model " + run + "/model --data " + tmp_.path() +
                                "/val.jsonl --output " + tmp_.path() + "/pred.jsonl");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  std::ifstream preds(tmp_.path() + "/pred.jsonl"), val(tmp_.path() + "/val.jsonl");
  int right = 0, total = 0;
  for (std::string pl, vl; std::getline(preds, pl) && std::getline(val, vl); ++total)
    right += nlohmann::json::parse(pl)["label"] ==
             std::to_string(nlohmann::json::parse(vl)["label"].get<int>());
  EXPECT_EQ(total, 64);
  EXPECT_GT(right, 57);

  // `ftune eval` on the validation file reproduces the selected model's validation metrics.
  const CliResult e = run_ftune("eval --model " + run + "/model --data " + tmp_.path() +
                                "/val.jsonl --output " + tmp_.path() + "/eval.json");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto evaluated = nlohmann::json::parse(std::ifstream(tmp_.path() + "/eval.json"));
  EXPECT_EQ(evaluated["accuracy"], summary["best_eval"]["accuracy"]);
  EXPECT_NEAR(evaluated["loss"].get<double>(), summary["best_eval"]["loss"].get<double>(), 1e-5);
  EXPECT_EQ(evaluated["confusion"], summary["best_eval"]["confusion"]);
  // predict and eval both decide at the validation threshold saved with the model.
  ASSERT_TRUE(fs::exists(run + "/model/decision_threshold.json"));
  EXPECT_EQ(evaluated["at_threshold"]["threshold"],
            summary["best_eval"]["at_threshold"]["threshold"]);
  EXPECT_EQ(right, std::lround(evaluated["at_threshold"]["accuracy"].get<double>() * 64));
  const CliResult missing =
      run_ftune("eval --model " + run + "/model --data " + tmp_.path() + "/missing.jsonl");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("missing.jsonl"), std::string::npos);
}

TEST_F(TrainCli, OverridesApplyAndAreSavedInTheResolvedConfig) {
  const CliResult r =
      run_ftune("train --config " + config() + " training.max_steps=3 training.log_every=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(std::ifstream(tmp_.path() + "/run/summary.json"));
  EXPECT_EQ(summary["steps"], 3);
  std::ifstream saved(tmp_.path() + "/run/config.yaml");
  const std::string text((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("max_steps: 3"), std::string::npos) << text;
}

TEST_F(TrainCli, BadConfigsNameTheKey) {
  struct Case {
    std::string extra, args, message;
  } cases[] = {
      {"  learnin_rate: 1.0e-3\n", "",
       "unknown key 'training.learnin_rate' (did you mean 'training.learning_rate'?)"},
      {"", "training.batch_size=many", "key 'training.batch_size' must be an integer or auto, got 'many'"},
      {"  batch_size: 8\n", "", "config.yaml:14: key 'training.batch_size' is given twice"},
      {"  schedule: exponential\n", "", "training.schedule"},
      {"", "training.epochs=0", "training.epochs"},
      {"", "training.device=gpu", "key 'training.device': unknown device 'gpu'"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_ftune("train --config " + config(c.extra) + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    // A value given on the command line is blamed on the command line, not the YAML file.
    if (c.args.empty()) {
      EXPECT_NE(r.output.find("config.yaml"), std::string::npos) << r.output;
    } else {
      EXPECT_NE(r.output.find("command-line override '" + c.args + "': key"), std::string::npos)
          << r.output;
      EXPECT_EQ(r.output.find("config.yaml"), std::string::npos) << r.output;
    }
  }
  const CliResult typo = run_ftune("train --config " + config() + " training.learnin_rate=0.1");
  EXPECT_NE(typo.output.find("command-line override 'training.learnin_rate=0.1': unknown key "
                             "'training.learnin_rate' (did you mean 'training.learning_rate'?)"),
            std::string::npos)
      << typo.output;
  const CliResult bare = run_ftune("train --config " + config() + " training.max_steps");
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_NE(bare.output.find("override 'training.max_steps' must look like section.key=value"),
            std::string::npos)
      << bare.output;
  const CliResult missing = run_ftune("train --config " + tmp_.path() + "/nope.yaml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("nope.yaml"), std::string::npos);
  std::ofstream(tmp_.path() + "/broken.yaml") << "model:\n  path: [unclosed\n";
  const CliResult broken = run_ftune("train --config " + tmp_.path() + "/broken.yaml");
  EXPECT_EQ(broken.exit_code, 2);
  EXPECT_NE(broken.output.find("broken.yaml:"), std::string::npos) << broken.output;
}

TEST_F(TrainCli, TrainsOnTheConfiguredDevice) {
  // training.device=cuda: where a GPU is visible the run trains there and says so in
  // summary.json, learning the task as on the CPU; elsewhere it fails naming the key.
  const CliResult r = run_ftune("train --config " + config() +
                                " training.device=cuda output.overwrite=true");
  if (cuda_device_count() == 0) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("key 'training.device' is 'cuda', but"), std::string::npos)
        << r.output;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(std::ifstream(tmp_.path() + "/run/summary.json"));
  EXPECT_EQ(summary["device"], "cuda:0");
  EXPECT_EQ(summary["memory"]["device"], "cuda:0");
  EXPECT_GT(summary["peak_device_bytes"].get<double>(), 0.0);
  EXPECT_EQ(summary["steps"], 96);
  EXPECT_GT(summary["final_eval"]["accuracy"].get<double>(), 0.9);
}

TEST_F(TrainCli, BadDataRowsNameFileAndLine) {
  std::ofstream(tmp_.path() + "/train.jsonl", std::ios::app) << "{\"text\": \"\", \"label\": 1}\n";
  const CliResult empty = run_ftune("train --config " + config());
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.output.find("train.jsonl:257: empty 'text'"), std::string::npos) << empty.output;

  write_pair_task(tmp_.path() + "/train.jsonl", 16, 1);
  std::ofstream(tmp_.path() + "/val.jsonl", std::ios::app)
      << "{\"text\": \"a\", \"text_pair\": \"b\", \"label\": 7}\n";
  const CliResult label = run_ftune("train --config " + config());
  EXPECT_EQ(label.exit_code, 2);
  EXPECT_NE(label.output.find("val.jsonl:65: label '7' is not one of the 2 labels"),
            std::string::npos)
      << label.output;
}

// CSV input, a stratified split of one file, k-fold, a preset, layer-wise LR decay and
// accumulation all run through the CLI, and the run directory holds a TensorBoard event file.
TEST_F(TrainCli, CsvSplitsFoldsPresetAndTensorBoard) {
  const std::string csv = tmp_.path() + "/train.csv";
  {
    std::ifstream in(tmp_.path() + "/train.jsonl");
    std::ofstream out(csv);
    out << "premise,hypothesis,gold\n";
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      out << '"' << j["text"].get<std::string>() << "\",\"" << j["text_pair"].get<std::string>()
          << "\"," << (j["label"].get<int>() ? "yes" : "no") << "\n";
    }
  }
  const std::string base = "data.train=" + csv +
                           " data.validation= data.text_field=premise "
                           "data.text_pair_field=hypothesis data.label_field=gold preset=bert "
                           "training.layer_decay=0.8 training.gradient_accumulation=2 "
                           "training.max_steps=4 training.learning_rate=1.0e-3";
  const CliResult split = run_ftune("train --config " + config() + " " + base +
                                    " data.validation_split=0.25 data.test_split=0.125");
  ASSERT_EQ(split.exit_code, 0) << split.output;
  const std::string run = tmp_.path() + "/run";
  auto summary = nlohmann::json::parse(std::ifstream(run + "/summary.json"));
  EXPECT_EQ(summary["labels"], nlohmann::json::array({"no", "yes"}));
  EXPECT_EQ(summary["effective_batch"], 32);
  EXPECT_EQ(summary["best_eval"]["rows"], 64);
  EXPECT_EQ(summary["test"]["rows"], 32);
  EXPECT_EQ(summary["data"]["train_file"]["rows"], 256);
  EXPECT_TRUE(summary["test"].contains("at_threshold")) << summary["test"].dump();
  std::string events;
  for (const auto& e : fs::directory_iterator(run))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      events = e.path().string();
  ASSERT_FALSE(events.empty());
  std::ifstream ev(events, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(ev)), std::istreambuf_iterator<char>());
  std::set<std::string> tags;
  for (const auto& event : decode_event_file(bytes))
    for (const auto& v : event.values) tags.insert(v.tag);
  for (const char* tag : {"train/loss", "train/lr", "validation/macro_f1", "test/accuracy"})
    EXPECT_TRUE(tags.count(tag)) << tag;
  std::ifstream saved(run + "/config.yaml");
  const std::string text((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("max_grad_norm: 1.0"), std::string::npos)
      << "preset keys are resolved: " << text;

  const CliResult fold = run_ftune("train --config " + config() + " " + base +
                                   " data.folds=4 data.fold=3 output.overwrite=true");
  ASSERT_EQ(fold.exit_code, 0) << fold.output;
  summary = nlohmann::json::parse(std::ifstream(run + "/summary.json"));
  EXPECT_EQ(summary["best_eval"]["rows"], 64);
  const CliResult bad_fold =
      run_ftune("train --config " + config() + " " + base + " data.folds=4 data.fold=4");
  EXPECT_EQ(bad_fold.exit_code, 2);
  EXPECT_NE(bad_fold.output.find("data.fold"), std::string::npos) << bad_fold.output;
  const CliResult typo = run_ftune("train --config " + config() + " " + base +
                                   " data.text_pair_field=hypotesis output.overwrite=true");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.output.find("no row has the column 'hypotesis' (key 'data.text_pair_field')"),
            std::string::npos)
      << typo.output;
  const CliResult bad_preset = run_ftune("train --config " + config() + " preset=gpt");
  EXPECT_EQ(bad_preset.exit_code, 2);
  EXPECT_NE(bad_preset.output.find("key 'preset' must be one of"), std::string::npos);
}

}  // namespace
}  // namespace ftune::test
