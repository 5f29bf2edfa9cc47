// ftune deletes only what it wrote (DESIGN.md principle 12), through `ftune train`: a run
// directory that holds the run's model or data, or files ftune did not write (a hand-written
// config.yaml, an adapter/ folder of the user's), is refused up front with a message naming them,
// exit code 2 and nothing touched; a run directory ftune made carries its marker, and
// output.overwrite there removes ftune's own files only; retention and leftover cleanup in
// checkpoints/ remove checkpoint directories only. A resume does not call the head it restores
// "newly initialised".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/checkpoint_store.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRunMarker = ".ftune-run";  // train/run_dir.h

// Every regular file under `dir` with its bytes: a tree that must stay untouched.
std::map<std::string, std::string> tree_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = file_bytes(e.path());
  return out;
}

class UserFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_, 3);  // a 3-label head: the 2-label task initialises a new one
    write_pair_task(tmp_.path() + "/train.jsonl", 32, 1);
  }
  // One epoch of 2 steps, a checkpoint at each; `output` is output.dir.
  std::string config(const std::string& output, const std::string& model,
                     const std::string& extra = "") {
    const std::string path = tmp_.path() + "/cfg-" + std::to_string(configs_++) + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  max_length: 24\n"
                        << "training:\n  epochs: 1\n  batch_size: 16\n  threads: 2\n"
                        << "checkpoint:\n  every_steps: 1\n"
                        << "output:\n  dir: " << output << "\n  progress: plain\n"
                        << extra;
    return path;
  }
  TempDir tmp_;
  std::string model_;
  int configs_ = 0;
};

// The first case: model.path inside output.dir; the base model was unlinked right after it
// loaded. Refused, naming it, and the model stays byte for byte.
TEST_F(UserFiles, ModelInsideTheRunDirectoryIsRefused) {
  const std::string ow = tmp_.path() + "/ow";
  fs::create_directories(ow);
  fs::copy(model_, ow + "/model", fs::copy_options::recursive);
  const auto before = tree_bytes(ow);
  const CliResult r = run_ftune("train --config " + config(ow, ow + "/model"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("contains model.path " + ow + "/model"), std::string::npos) << r.output;
  EXPECT_EQ(tree_bytes(ow), before);
  EXPECT_FALSE(fs::exists(ow + "/" + kRunMarker));
}

// model.path=<previous run>/model with output.overwrite: refused; the previous run's model stays.
TEST_F(UserFiles, OverwriteOfTheRunHoldingTheModelIsRefused) {
  const std::string run = tmp_.path() + "/run";
  ASSERT_EQ(run_ftune("train --config " + config(run, model_)).exit_code, 0);
  ASSERT_TRUE(fs::exists(run + "/model/model.safetensors"));
  const auto before = tree_bytes(run + "/model");
  const CliResult r =
      run_ftune("train --config " + config(run, run + "/model", "") + " output.overwrite=true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("contains model.path"), std::string::npos) << r.output;
  EXPECT_EQ(tree_bytes(run + "/model"), before);
}

// output.dir: . in a folder of the user's: its hand-written config.yaml was replaced and its
// adapter/ deleted, exit 0. Refused, naming them; nothing changes. The data inside it is named too.
TEST_F(UserFiles, DirectoryOfTheUsersIsRefused) {
  const std::string work = tmp_.path() + "/work";
  fs::create_directories(work + "/adapter");
  std::ofstream(work + "/config.yaml") << "# my own notes\n";
  std::ofstream(work + "/adapter/adapter_config.json") << "{}\n";
  const auto before = tree_bytes(work);
  CliResult r = run_ftune("train --config " + config(work, model_));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("holds files ftune did not write (adapter/, config.yaml)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(tree_bytes(work), before);
  // The data inside output.dir: refused before anything is read.
  r = run_ftune("train --config " + config(tmp_.path(), model_));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("contains"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(tmp_.path() + "/train.jsonl"));
  EXPECT_FALSE(fs::exists(tmp_.path() + "/" + kRunMarker));
}

// A run directory ftune made carries its marker; output.overwrite there replaces ftune's files and
// leaves a file the user added. An empty directory the user made is adopted.
TEST_F(UserFiles, OverwriteRemovesOnlyFtunesOwnFiles) {
  const std::string run = tmp_.path() + "/run";
  fs::create_directories(run);  // empty: adopted
  ASSERT_EQ(run_ftune("train --config " + config(run, model_)).exit_code, 0);
  EXPECT_TRUE(fs::exists(run + "/" + kRunMarker));
  std::ofstream(run + "/notes.txt") << "mine\n";
  const CliResult r = run_ftune("train --config " + config(run, model_) + " output.overwrite=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(file_bytes(run + "/notes.txt"), "mine\n");
  EXPECT_TRUE(fs::exists(run + "/model/model.safetensors"));
  EXPECT_FALSE(fs::exists(run + "/model.old"));
  EXPECT_FALSE(fs::exists(run + "/model.tmp"));
}

// Leftover cleanup in checkpoints/ removes what ftune's own names say it wrote: a directory of the
// user's there stays; an interrupted save's temporary goes.
TEST_F(UserFiles, CheckpointCleanupRemovesCheckpointDirectoriesOnly) {
  const std::string run = tmp_.path() + "/ckrun";
  fs::create_directories(run + "/checkpoints/my-notes");
  fs::create_directories(run + "/checkpoints/.tmp-step-0000003-4242");
  std::ofstream(run + "/checkpoints/my-notes/a.txt") << "mine\n";
  CheckpointStore store(run, 2);
  EXPECT_TRUE(fs::exists(run + "/checkpoints/my-notes/a.txt"));
  EXPECT_FALSE(fs::exists(run + "/checkpoints/.tmp-step-0000003-4242"));
}

// A resume restores the head from the checkpoint: it does not warn that it was newly initialised
// (a fresh run does).
TEST_F(UserFiles, ResumeDoesNotCallTheRestoredHeadNew) {
  const std::string run = tmp_.path() + "/killed";
  const CliResult first =
      run_ftune("train --config " + config(run, model_), "FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT=1");
  EXPECT_NE(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("newly initialised"), std::string::npos) << first.output;
  const CliResult resumed = run_ftune("train --config " + config(run, model_) + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(resumed.output.find("newly initialised"), std::string::npos) << resumed.output;
}

// A run resumed on more ranks, each of which now holds fewer rows of a step than the checkpoint's
// micro-batch: the warning says what the plan holds (it used to read "micro-batches of 16 rows;
// this run plans 16").
TEST_F(UserFiles, ResumeOnMoreRanksExplainsTheMicroBatch) {
  const std::string run = tmp_.path() + "/ranks";
  const CliResult first =
      run_ftune("train --config " + config(run, model_), "FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT=1");
  EXPECT_NE(first.exit_code, 0) << first.output;
  const CliResult resumed =
      run_ftune_ranks(2, "train --config " + config(run, model_) + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(resumed.output.find("this run plans"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("more than the 8 rows per micro-batch"), std::string::npos)
      << resumed.output;
}

}  // namespace
}  // namespace ftune::test
