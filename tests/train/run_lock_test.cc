// One process per run directory: a live run (here stopped with SIGSTOP, so it holds its lock as
// long as the test needs) refuses a --resume, an output.overwrite run and a plain run next to it,
// naming its pid, and is not disturbed by them; once it dies by kill -9 its lock is free.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class RunLock : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_bert(tmp_.path() + "/tiny");
    write_pair_task(tmp_.path() + "/train.jsonl", 64, 1);
    // Long enough never to finish while the test holds it stopped; no evaluation, and no
    // checkpoint before the end unless a signal asks for one.
    std::ofstream(config_) << "model:\n  path: " << tmp_.path()
                           << "/tiny\ndata:\n  train: " << tmp_.path()
                           << "/train.jsonl\n  max_length: 16\n"
                           << "training:\n  max_steps: 1000000\n  batch_size: 8\n"
                           << "  log_every: 1\n  threads: 1\n"
                           << "output:\n  dir: " << run_ << "\n  progress: plain\n";
  }
  // Starts `ftune train` with `args` and stops it (SIGSTOP) once it logged `started`.
  pid_t start_and_stop(const std::string& args, const std::string& started) {
    const pid_t pid = spawn_ftune("train --config " + config_ + args, log_);
    EXPECT_TRUE(wait_for_text(log_, started)) << file_bytes(log_);
    kill(pid, SIGSTOP);
    return pid;
  }
  TempDir tmp_;
  std::string config_ = tmp_.path() + "/run.yaml", run_ = tmp_.path() + "/run",
              log_ = tmp_.path() + "/log.txt";
};

TEST_F(RunLock, ASecondProcessIsRefusedUntilTheHolderDies) {
  const pid_t pid = start_and_stop("", "for 1000000 steps");
  const std::string in_use = "output.dir " + run_ + " is in use by another ftune process (pid " +
                             std::to_string(pid) + ")";
  // (max_steps 2 keeps a run that wrongly starts, as before the lock, short.)
  for (const char* args : {" --resume", " output.overwrite=true training.max_steps=2", ""}) {
    const CliResult r = run_ftune("train --config " + config_ + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(in_use), std::string::npos) << args << "\n" << r.output;
  }
  // The overwrite wiped nothing: the live run goes on and stops cleanly on SIGTERM, saving its
  // checkpoint into the directory it still owns.
  EXPECT_TRUE(fs::exists(run_ + "/metrics.jsonl"));
  kill(pid, SIGCONT);
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_ftune(pid), 128 + SIGTERM) << file_bytes(log_);
  EXPECT_TRUE(fs::exists(run_ + "/checkpoints/index.json")) << file_bytes(log_);
  EXPECT_FALSE(fs::exists(run_ + "/.ftune.lock"));  // released: the lock file goes with it

  // kill -9 of a holder: the kernel drops the lock; the stale file with its pid is no obstacle.
  const pid_t resumed = start_and_stop(" --resume", "resumed from");
  kill(resumed, SIGKILL);
  EXPECT_EQ(wait_ftune(resumed), 128 + SIGKILL);
  EXPECT_TRUE(fs::exists(run_ + "/.ftune.lock"));
  const CliResult after =
      run_ftune("train --config " + config_ + " output.overwrite=true training.max_steps=2");
  EXPECT_EQ(after.exit_code, 0) << after.output;
}

}  // namespace
}  // namespace ftune::test
