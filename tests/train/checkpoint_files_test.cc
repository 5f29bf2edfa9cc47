// Corrupt resume files, as fuzz/fuzz_checkpoint found them: checkpoints/index.json,
// trainer_state.json and its early-stopping state. Each is refused with an InputError naming the
// file and the key (before, JSON library exceptions escaped, or a duplicate index entry made
// retention delete a checkpoint the index still named).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../io/io_test_helpers.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/checkpoint_store.h"
#include "train/early_stopping.h"
#include "train/trainer_state.h"

namespace ftune {
namespace {

namespace fs = std::filesystem;
using test::expect_input_error;

// A run directory whose checkpoints/index.json holds `index` and whose step directories exist.
class CheckpointIndex : public ::testing::Test {
 protected:
  void write_index(const std::string& index, std::initializer_list<int64_t> steps = {}) {
    fs::create_directories(root_);
    for (int64_t s : steps) fs::create_directories(root_ + "/" + checkpoint_dir_name(s));
    test::write_bytes(root_ + "/index.json", index);
  }
  test::TempDir run_;
  std::string root_ = run_.path() + "/checkpoints";
};

TEST_F(CheckpointIndex, MissingOrMistypedKeysAreInputErrors) {
  for (const std::string index : {"{}", "[]", "{\"checkpoints\": 5}"}) {
    write_index(index);
    expect_input_error([&] { CheckpointStore(run_.path(), 2); },
                       {"index.json", "'checkpoints' array"});
  }
  write_index(R"({"checkpoints": [{"dir": "step-0000003"}]})", {3});
  expect_input_error([&] { CheckpointStore(run_.path(), 2); }, {"index.json", "'step'"});
  write_index(R"({"checkpoints": [{"step": "3"}]})", {3});
  expect_input_error([&] { CheckpointStore(run_.path(), 2); }, {"'step'", "integer"});
  write_index(R"({"checkpoints": [{"step": 3}], "best_step": "3"})", {3});
  expect_input_error([&] { CheckpointStore(run_.path(), 2); }, {"'best_step'", "integer"});
  write_index(R"({"checkpoints": [{"step": -3}]})");
  expect_input_error([&] { CheckpointStore(run_.path(), 2); }, {"step -3", "negative"});
}

// A step listed twice made retention delete the directory of a checkpoint it kept.
TEST_F(CheckpointIndex, DuplicateStepIsRefused) {
  write_index(R"({"checkpoints": [{"step": 3}, {"step": 3}, {"step": 5}], "best_step": 5})",
              {3, 5});
  expect_input_error([&] { CheckpointStore(run_.path(), 2); }, {"checkpoint 3", "twice"});
}

TEST_F(CheckpointIndex, UnsortedIndexStillNamesTheLastCheckpoint) {
  write_index(R"({"checkpoints": [{"step": 5}, {"step": 3}], "best_step": 3})", {3, 5});
  CheckpointStore store(run_.path(), 2);
  ASSERT_TRUE(store.last().has_value());
  EXPECT_EQ(store.last()->step, 5);
  EXPECT_EQ(store.best()->step, 3);
}

// trainer_state.json as the trainer writes it.
nlohmann::json valid_state() {
  return nlohmann::json::parse(R"({
    "version": 2, "step": 6, "epoch": 0, "micro_batch": 4, "micro_batches": 12,
    "optimizer_steps": 6, "samples": 48, "real_tokens": 600, "skipped_steps": 0,
    "nonfinite_in_row": 0, "loss_scale": 1.0, "loss_scale_good_steps": 0,
    "train_seconds": 1.5, "input_wait_seconds": 0.1,
    "best_eval": {"accuracy": 0.5, "loss": 0.69, "step": 6}, "last_eval": null,
    "early_stopping": {"metric": "accuracy", "best": 0.5, "best_loss": 0.69, "best_step": 6,
                       "evals_without_improvement": 0},
    "seed": 42, "gradient_checkpointing": false, "threads": 2,
    "fingerprints": {"model": "a", "tokenizer": "b", "data": {}, "config": "c"}})");
}

TEST(TrainerState, ValidStateReads) {
  const TrainerState s = parse_trainer_state(valid_state(), "trainer_state.json");
  EXPECT_EQ(s.step, 6);
  EXPECT_EQ(s.micro_batch, 4);
  EXPECT_EQ(s.loss_scale, 1.0f);
  EXPECT_TRUE(s.best_eval.is_object());
  EXPECT_TRUE(s.last_eval.is_null());
}

// Each value a fuzzed trainer_state.json held: before, a JSON type_error or out_of_range escaped
// ("unexpected error" without the file or key), micro_batch 0 failed an internal assertion, and a
// best_eval that is not an object broke the end of the resumed run.
TEST(TrainerState, EveryFieldIsValidatedWithItsKey) {
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases = {
      {"step", "6", "'step' must be an integer"},
      {"step", -1, "'step' must be at least 0"},
      {"micro_batch", 0, "'micro_batch' must be at least 1"},
      {"micro_batches", nullptr, "'micro_batches'"},
      {"threads", 0, "'threads' must be at least 1"},
      {"loss_scale", -2.0, "'loss_scale' must be a positive finite number"},
      {"loss_scale", 1e300, "'loss_scale' must be a positive finite number"},
      {"train_seconds", -1.0, "'train_seconds'"},
      {"best_eval", 0.5, "'best_eval' must be an object or null"},
      {"early_stopping", nullptr, "'early_stopping' must be an object"},
      {"gradient_checkpointing", "no", "'gradient_checkpointing' must be true or false"},
      {"fingerprints", nlohmann::json::object(), "'fingerprints' must hold 'model'"},
      // The label check of resume read these names with get<vector<string>>: a type_error.
      {"fingerprints",
       {{"model", "a"}, {"tokenizer", "b"}, {"data", {}}, {"config", "c"}, {"labels", {"a", 1}}},
       "'fingerprints.labels' must be a list of label names"},
      {"version", 1, "version 1, expected 2"},
  };
  for (const auto& [key, value, fragment] : cases) {
    nlohmann::json j = valid_state();
    j[key] = value;
    expect_input_error([&] { parse_trainer_state(j, "ckpt/trainer_state.json"); },
                       {"ckpt/trainer_state.json", fragment});
  }
  nlohmann::json missing = valid_state();
  missing.erase("samples");
  expect_input_error([&] { parse_trainer_state(missing, "t.json"); },
                     {"missing required key 'samples'"});
}

TEST(TrainerState, EarlyStoppingStateIsValidated) {
  EarlyStopping e("accuracy", true, 3, 0.0);
  nlohmann::json s = valid_state()["early_stopping"];
  e.restore(s, "t.json: early_stopping");
  EXPECT_EQ(e.best_step(), 6);
  s["best_loss"] = nullptr;  // state() writes a NaN loss as null: it reads back
  e.restore(s, "t.json: early_stopping");
  s.erase("best_step");
  expect_input_error([&] { e.restore(s, "t.json: early_stopping"); },
                     {"t.json: early_stopping", "'best_step'"});
  s = valid_state()["early_stopping"];
  s["evals_without_improvement"] = -4;
  expect_input_error([&] { e.restore(s, "t.json: early_stopping"); },
                     {"evals_without_improvement (-4)"});
}

// End to end: `ftune train --resume` over a corrupt trainer_state.json names the file and the key
// (before: an internal assertion about a micro-batch of 0 rows, or a JSON library message).
TEST(TrainerState, ResumeRefusesACorruptStateByFileAndKey) {
  test::TempDir tmp;
  test::write_tiny_bert(tmp.path() + "/tiny");
  test::write_pair_task(tmp.path() + "/train.jsonl", 32, 1);
  const std::string config = tmp.path() + "/c.yaml";
  std::ofstream(config) << "model:\n  path: " << tmp.path()
                        << "/tiny\ndata:\n  train: " << tmp.path()
                        << "/train.jsonl\n  max_length: 16\n"
                        << "training:\n  epochs: 1\n  batch_size: 8\n  threads: 1\n"
                        << "checkpoint:\n  every_steps: 2\noutput:\n  dir: " << tmp.path()
                        << "/run\n  progress: plain\n";
  const test::CliResult killed =
      test::run_ftune("train --config " + config, "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=3");
  ASSERT_EQ(killed.exit_code, 137) << killed.output;
  const std::string state =
      tmp.path() + "/run/checkpoints/" + checkpoint_dir_name(2) + "/trainer_state.json";
  const nlohmann::json good = nlohmann::json::parse(test::file_bytes(state));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"micro_batch", 0}, {"samples", "16"}, {"early_stopping", 3}}) {
    nlohmann::json bad = good;
    bad[key] = value;
    test::write_bytes(state, bad.dump());
    const test::CliResult r = test::run_ftune("train --config " + config + " --resume");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(state), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("'" + key + "'"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace ftune
