// `ftune hpo` failing fast, end to end: a worker whose trials keep failing the same way gives up
// (with back-off meanwhile) and exits non-zero; trial_timeout_s stops a hung command's whole
// process group (SIGTERM, then SIGKILL); a worker killed with -9 takes its command along;
// status/best/export never create a storage; --trials and --timeout take positive values only.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "hpo_cli_util.h"
#include "hpo/storage.h"
#include "io/atomic_file.h"
#include "run_cli.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

// A study whose every trial fails the same way (here: the command exits 3) no longer churns
// through trials: the worker waits between failures (failure_backoff_s, doubling), gives up after
// max_consecutive_failures in a row and exits non-zero saying why.
TEST(HpoCli, WorkerGivesUpAfterRepeatedFailuresAndExitsNonZero) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg =
      write_config(dir.path(), db, "fail", "max_consecutive_failures: 3\nfailure_backoff_s: 0.1\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_ftune("hpo run --config " + cfg);  // no trial budget
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("this worker stopped: 3 trials in a row failed with the same error "
                          "(max_consecutive_failures: 3); the last: trial 2: command exited "
                          "with status 3"),
            std::string::npos)
      << r.output;
  EXPECT_GE(seconds, 0.1 + 0.2);  // the back-off after the first and the second failure
  auto storage = open_storage(db);
  EXPECT_EQ(storage->trials(storage->find_study("demo")->id).size(), 3u);
  // The default: five in a row.
  write_config(dir.path(), db, "fail", "failure_backoff_s: 0.01\n");
  r = test::run_ftune("hpo run --config " + cfg + " --study defaults");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(storage->trials(storage->find_study("defaults")->id).size(), 5u);
}

// Polls until `pid` has ended (or is a zombie); false after `seconds`.
bool wait_gone(int pid, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!process_gone(pid)) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(seconds))
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// trial_timeout_s: a hung command (its child sleeps for good) is stopped after the timeout with
// its whole process group, SIGTERM first; one that ignores SIGTERM gets SIGKILL kill_grace_s
// later. The trial fails with the reason and the worker exits non-zero.
TEST(HpoCli, TrialTimeoutStopsTheCommandsProcessGroup) {
  for (const std::string mode : {"hang", "stubborn"}) {
    SCOPED_TRACE(mode);
    test::TempDir dir;
    write_objective(dir.path());
    const std::string db = dir.path() + "/study.db";
    const std::string cfg =
        write_config(dir.path(), db, mode, "trial_timeout_s: 1\nkill_grace_s: 1\n", "60");
    const auto t0 = std::chrono::steady_clock::now();
    auto r = test::run_ftune("hpo run --config " + cfg + " --trials 1");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_LT(seconds, 30) << r.output;
    ASSERT_TRUE(std::filesystem::exists(dir.path() + "/child.pid")) << r.output;
    const int child = std::stoi(io::read_file(dir.path() + "/child.pid"));
    EXPECT_TRUE(wait_gone(child, 5)) << "the command's child outlived the timeout";
    kill(child, SIGKILL);
    auto storage = open_storage(db);
    const auto trials = storage->trials(storage->find_study("demo")->id);
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].state, TrialState::Failed);
    EXPECT_NE(trials[0].error.find("trial_timeout_s: the trial ran for more than 1 s"),
              std::string::npos)
        << trials[0].error;
    EXPECT_EQ(trials[0].intermediate.size(), 1u);  // what it reported before is kept
  }
}

// A worker killed with -9 takes its command along: the command's supervisor gets a signal when
// the worker dies (PR_SET_PDEATHSIG) and stops the command's whole process group, so a retry of
// the trial never runs next to the orphaned first attempt.
TEST(HpoCli, KilledWorkerTakesItsCommandAlong) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "hang", "", "60");
  const std::string start =
      fmt::format("cd {}; {} hpo run --config {} --trials 1 > a.log 2>&1 & echo $! > a.pid",
                  dir.path(), test::ftune_binary(), cfg);
  ASSERT_EQ(std::system(start.c_str()), 0);
  ASSERT_TRUE(wait_for_file(dir.path() + "/child.pid")) << "no trial started within 30 s";
  const int worker = std::stoi(io::read_file(dir.path() + "/a.pid"));
  const int child = std::stoi(io::read_file(dir.path() + "/child.pid"));
  EXPECT_FALSE(process_gone(child));
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  EXPECT_TRUE(wait_gone(child, 10)) << "the trial command outlived its worker (kill -9)";
  kill(child, SIGKILL);
}

// status, best and export read a storage; a mistyped path must not leave an empty database
// behind. --trials and --timeout take positive values only.
TEST(HpoCli, MissingStorageIsNotCreatedAndBadBudgetsAreRefused) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string missing = dir.path() + "/missing.db";
  for (const std::string verb : {"status", "best", "export --format json --output x.json"}) {
    for (const std::string url : {missing, "sqlite:///" + missing}) {
      auto r = test::run_ftune("hpo " + verb + " --storage " + url);
      EXPECT_EQ(r.exit_code, 2) << verb << ": " << r.output;
      EXPECT_NE(r.output.find(missing + ": no such study storage"), std::string::npos)
          << verb << ": " << r.output;
      EXPECT_FALSE(std::filesystem::exists(missing)) << verb << " created " << missing;
    }
  }
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "fast");
  for (const std::string bad : {"--trials 0", "--trials -2", "--timeout 0", "--timeout -1"}) {
    auto r = test::run_ftune("hpo run --config " + cfg + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(bad.substr(0, bad.find(' ')) + " must be"), std::string::npos)
        << bad << ": " << r.output;
    EXPECT_FALSE(std::filesystem::exists(db)) << bad;
  }
}

}  // namespace
}  // namespace ftune::hpo
