// `ftune hpo` end to end: several worker processes on one SQLite file and on PostgreSQL (every
// trial terminal, numbers 0..N-1 once each, the SQLite file intact), a worker killed with -9
// mid-trial (its trial failed after the grace period and retried with the same params), a worker
// stopped (SIGSTOP) past the grace period whose late result is discarded and logged, kill -9
// during heavy writes (file intact, the study resumable), status/best/export, and bad input
// (exit 2 with a message naming what is wrong). Failing fast: hpo_cli_failfast_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "hpo/storage.h"
#include "hpo_cli_util.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "pg_server.h"
#include "run_cli.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

using test::PgServer;

// Starts `n` workers in the background; returns a shell snippet's exit status per worker.
std::vector<int> run_workers(int n, const std::string& args, const std::string& dir) {
  std::string cmd = "cd " + dir + "; ";
  for (int i = 0; i < n; ++i)
    cmd += fmt::format("({} hpo run {} > w{}.log 2>&1; echo $? > w{}.rc) & ", test::ftune_binary(),
                       args, i, i);
  cmd += "wait";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::vector<int> rc;
  for (int i = 0; i < n; ++i) {
    std::ifstream f(fmt::format("{}/w{}.rc", dir, i));
    int v = -1;
    f >> v;
    rc.push_back(v);
    if (v != 0) ADD_FAILURE() << io::read_file(fmt::format("{}/w{}.log", dir, i));
  }
  return rc;
}

std::string integrity_check(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK)
    while (sqlite3_step(st) == SQLITE_ROW)
      out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  else
    out = sqlite3_errmsg(db);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

void expect_study_done(const std::string& url, int64_t n) {
  auto storage = open_storage(url);
  auto study = storage->find_study("demo");
  ASSERT_TRUE(study);
  auto trials = storage->trials(study->id);
  ASSERT_EQ(trials.size(), static_cast<size_t>(n));
  std::set<int64_t> numbers;
  for (const Trial& t : trials) {
    numbers.insert(t.number);
    EXPECT_EQ(t.state, TrialState::Complete) << "trial " << t.number << ": " << t.error;
    ASSERT_TRUE(t.value);
    const double x = t.params.at("x"), y = t.params.at("y");
    EXPECT_NEAR(*t.value, x * x + y, 1e-4 * (1 + x * x + y));
    EXPECT_EQ(t.fold_values.size(), 2u);
    ASSERT_EQ(t.intermediate.size(), 2u);  // step 0 (x), then the folds' running means
    EXPECT_NEAR(t.intermediate.at(1), (x + y) / 2, 1e-4 * (1 + std::abs(x) + y));
  }
  EXPECT_EQ(numbers.size(), static_cast<size_t>(n));
  EXPECT_EQ(*numbers.rbegin(), n - 1);
}

TEST(HpoCli, FourWorkersShareOneSqliteFile) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), "sqlite:///" + db, "slow", "", "60");
  run_workers(4, "--config " + cfg + " --trials 40", dir.path());
  expect_study_done("sqlite:///" + db, 40);
  EXPECT_EQ(integrity_check(db), "ok");

  auto status = test::run_ftune("hpo status --config " + cfg);
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("40 trials: 40 complete"), std::string::npos) << status.output;
  auto best = test::run_ftune("hpo best --json --storage sqlite:///" + db + " --study demo");
  ASSERT_EQ(best.exit_code, 0) << best.output;
  const auto j = nlohmann::json::parse(best.output);
  auto storage = open_storage(db);
  double lowest = 1e300;
  for (const Trial& t : storage->trials(storage->find_study("demo")->id))
    lowest = std::min(lowest, *t.value);
  EXPECT_EQ(j["value"].get<double>(), lowest);
  auto csv = test::run_ftune("hpo export --config " + cfg + " --format csv --output " + dir.path() +
                             "/t.csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  const std::string text = io::read_file(dir.path() + "/t.csv");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 41);
  EXPECT_EQ(text.rfind("number,state,value,", 0), 0u) << text.substr(0, 200);
  EXPECT_NE(text.find("params_x"), std::string::npos);
  auto js = test::run_ftune("hpo export --config " + cfg + " --format json --output " + dir.path() +
                            "/t.json");
  ASSERT_EQ(js.exit_code, 0) << js.output;
  EXPECT_EQ(io::read_json_file(dir.path() + "/t.json")["trials"].size(), 40u);
}

TEST(HpoCli, SixteenWorkersOnOneSqliteFileNeverSeeALock) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "fast", "", "60");
  const auto rc = run_workers(16, "--config " + cfg + " --trials 64", dir.path());
  for (size_t i = 0; i < rc.size(); ++i) {
    EXPECT_EQ(rc[i], 0);
    const std::string log = io::read_file(fmt::format("{}/w{}.log", dir.path(), i));
    EXPECT_EQ(log.find("locked"), std::string::npos) << log;
    EXPECT_EQ(log.find("busy"), std::string::npos) << log;
  }
  expect_study_done(db, 64);
  EXPECT_EQ(integrity_check(db), "ok");
}

TEST(HpoCli, FourWorkersShareOnePostgresDatabase) {
  std::string why;
  PgServer* pg = PgServer::shared(&why);
  if (!pg) GTEST_SKIP() << why;
  test::TempDir dir;
  write_objective(dir.path());
  const std::string url = pg->fresh_database_url();
  const std::string cfg = write_config(dir.path(), url, "slow", "", "60");
  run_workers(4, "--config " + cfg + " --trials 40", dir.path());
  expect_study_done(url, 40);
}

// Worker A's first trial blocks; A is killed with -9; worker B must fail that trial after the
// grace period and run its retry. `sqlite_file`: checked with integrity_check when not empty.
void kill_worker_mid_trial(const std::string& url, const std::string& sqlite_file,
                           const test::TempDir& dir) {
  write_objective(dir.path());
  const std::string cfg = write_config(dir.path(), url, "killme");
  // Worker A takes the first trial, which blocks; kill -9 it mid-trial.
  const std::string start_a = fmt::format(
      "cd {}; {} hpo run --config {} --trials 3 > a.log 2>&1 "
      "& echo $! > a.pid",
      dir.path(), test::ftune_binary(), cfg);
  ASSERT_EQ(std::system(start_a.c_str()), 0);
  ASSERT_TRUE(wait_for_file(dir.path() + "/marker/n")) << "no trial started within 30 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int pid = std::stoi(io::read_file(dir.path() + "/a.pid"));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Worker B runs the rest of the study and, after the grace period, the retry.
  run_workers(1, "--config " + cfg + " --trials 3", dir.path());
  auto storage = open_storage(url);
  auto trials = storage->trials(storage->find_study("demo")->id);
  ASSERT_EQ(trials.size(), 4u);
  const Trial& killed = trials[0];
  EXPECT_EQ(killed.state, TrialState::Failed);
  EXPECT_NE(killed.error.find("no heartbeat"), std::string::npos) << killed.error;
  int retries = 0;
  for (const Trial& t : trials) {
    EXPECT_TRUE(t.finished()) << t.number;
    if (t.retry_of == killed.number) {
      ++retries;
      EXPECT_EQ(t.state, TrialState::Complete);
      EXPECT_EQ(t.params, killed.params);
    }
  }
  EXPECT_EQ(retries, 1);
  if (!sqlite_file.empty()) EXPECT_EQ(integrity_check(sqlite_file), "ok");
}

TEST(HpoCli, KilledWorkersTrialIsFailedAndRetriedOnSqlite) {
  test::TempDir dir;
  const std::string db = dir.path() + "/study.db";
  kill_worker_mid_trial(db, db, dir);
}

TEST(HpoCli, KilledWorkersTrialIsFailedAndRetriedOnPostgres) {
  std::string why;
  PgServer* pg = PgServer::shared(&why);
  if (!pg) GTEST_SKIP() << why;
  test::TempDir dir;
  kill_worker_mid_trial(pg->fresh_database_url(), "", dir);
}

// Worker A's process is stopped (SIGSTOP: a stalled machine) mid-trial, past the grace period;
// worker B fails the trial as stale and runs its retry to the end. A then resumes and its trial's
// command prints a value: the study keeps B's result only, A's is refused and A's log says what
// was discarded, since when the trial was failed and which trial retried it.
TEST(HpoCli, StalledWorkersLateResultIsDiscardedAndLogged) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "stall");
  // `exec` keeps the pid written by the shell: a.pid is the worker itself.
  const std::string start_a = fmt::format(
      "cd {0}; (sh -c 'echo $$ > a.pid; exec {1} hpo run --config {2} --trials 1' > a.log 2>&1; "
      "echo $? > a.rc) &",
      dir.path(), test::ftune_binary(), cfg);
  ASSERT_EQ(std::system(start_a.c_str()), 0);
  ASSERT_TRUE(wait_for_file(dir.path() + "/marker/n")) << "no trial started within 30 s";
  const auto t0 = std::chrono::steady_clock::now();
  const int worker_a = std::stoi(io::read_file(dir.path() + "/a.pid"));
  ASSERT_EQ(kill(worker_a, SIGSTOP), 0);
  // B waits out the grace period, fails trial 0, runs its retry (trial 1) and ends: the budget of
  // one trial is spent and nothing runs any more.
  run_workers(1, "--config " + cfg + " --trials 1", dir.path());
  io::write_file_atomic(dir.path() + "/go", "");
  ASSERT_EQ(kill(worker_a, SIGCONT), 0);
  // a.rc is written once A has exited (non-empty: its exit status written).
  while (!std::filesystem::exists(dir.path() + "/a.rc") ||
         std::filesystem::file_size(dir.path() + "/a.rc") == 0) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string log_a = io::read_file(dir.path() + "/a.log");
  EXPECT_EQ(std::stoi(io::read_file(dir.path() + "/a.rc")), 0) << log_a;
  EXPECT_NE(log_a.find("trial 0: its result (COMPLETE, value 7) was discarded: the trial was "
                       "failed as stale at "),
            std::string::npos)
      << log_a;
  EXPECT_NE(log_a.find("and retried as trial 1"), std::string::npos) << log_a;
  EXPECT_NE(log_a.find("1 discarded"), std::string::npos) << log_a;
  auto storage = open_storage(db);
  const auto trials = storage->trials(storage->find_study("demo")->id);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].state, TrialState::Failed);
  EXPECT_NE(trials[0].error.find("no heartbeat"), std::string::npos) << trials[0].error;
  EXPECT_FALSE(trials[0].value);
  EXPECT_EQ(trials[1].state, TrialState::Complete);
  EXPECT_EQ(trials[1].retry_of, 0);
  EXPECT_EQ(trials[1].params, trials[0].params);
  const double x = trials[1].params.at("x"), y = trials[1].params.at("y");
  ASSERT_TRUE(trials[1].value);
  EXPECT_NEAR(*trials[1].value, x * x + y, 1e-4 * (1 + x * x + y));
  const auto counts = storage->count_by_state(storage->find_study("demo")->id);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Complete)], 1);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Failed)], 1);
  EXPECT_EQ(integrity_check(db), "ok");
}

TEST(HpoCli, SigtermFailsTheTrialAtOnceAndStopsItsCommand) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "killme");
  const std::string start =
      fmt::format("cd {}; {} hpo run --config {} --trials 3 > a.log 2>&1 & echo $! > a.pid",
                  dir.path(), test::ftune_binary(), cfg);
  ASSERT_EQ(std::system(start.c_str()), 0);
  ASSERT_TRUE(wait_for_file(dir.path() + "/marker/n")) << "no trial started within 30 s";
  const auto t0 = std::chrono::steady_clock::now();
  const int worker = std::stoi(io::read_file(dir.path() + "/a.pid"));
  const int command = std::stoi(io::read_file(dir.path() + "/marker/pid"));
  ASSERT_EQ(kill(worker, SIGTERM), 0);
  while (!process_gone(worker)) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(process_gone(command)) << "the trial command outlived its worker";
  EXPECT_NE(io::read_file(dir.path() + "/a.log").find("interrupted"), std::string::npos)
      << io::read_file(dir.path() + "/a.log");
  auto storage = open_storage(db);
  const auto trials = storage->trials(storage->find_study("demo")->id);
  ASSERT_EQ(trials.size(), 1u);  // no further trial started
  EXPECT_EQ(trials[0].state, TrialState::Failed);
  EXPECT_NE(trials[0].error.find("interrupted"), std::string::npos) << trials[0].error;
}

TEST(HpoCli, KillDuringHeavyWritesLeavesTheDatabaseIntact) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "heavy");
  for (int round = 0; round < 3; ++round) {
    // The kill comes 0.4-0.8 s after the database exists (up to 60 s of waiting for it: on a
    // loaded machine the workers may take seconds to start), so it lands during the writes.
    const std::string cmd = fmt::format(
        "cd {0}; p=''; for i in 1 2 3 4; do {1} hpo run --config {2} > /dev/null 2>&1 & "
        "p=\"$p $!\"; done; n=0; while [ ! -s {4} ] && [ $n -lt 600 ]; do sleep 0.1; "
        "n=$((n+1)); done; sleep 0.{3}; kill -9 $p; wait",
        dir.path(), test::ftune_binary(), cfg, 4 + 2 * round, db);
    std::system(cmd.c_str());
    EXPECT_EQ(integrity_check(db), "ok") << "round " << round;
  }
  auto storage = open_storage(db);
  const int64_t study = storage->find_study("demo")->id;
  const auto before = storage->trials(study);
  ASSERT_FALSE(before.empty());
  // The study resumes: a new worker fails the killed workers' trials after the grace period.
  run_workers(1, fmt::format("--config {} --trials {}", cfg, before.size()), dir.path());
  for (const Trial& t : storage->trials(study)) EXPECT_TRUE(t.finished()) << t.number;
  EXPECT_EQ(integrity_check(db), "ok");
}

TEST(HpoCli, PrunerStopsTheCommandAndTheTrialEndsPruned) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  // Every trial reports x at steps 0..29; the median pruner stops those above the median of the
  // earlier trials, from step 0 on.
  std::string cfg = write_config(dir.path(), db, "prune");
  std::string text = io::read_file(cfg);
  text.replace(text.find("pruner: {type: none}"), 20,
               "pruner: {type: median, n_startup_trials: 3, n_warmup_steps: 0}");
  io::write_file_atomic(cfg, text);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_ftune("hpo run --config " + cfg + " --trials 12");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto storage = open_storage(db);
  int pruned = 0;
  for (const Trial& t : storage->trials(storage->find_study("demo")->id)) {
    if (t.state != TrialState::Pruned) {
      EXPECT_EQ(t.state, TrialState::Complete) << t.error;
      continue;
    }
    ++pruned;
    EXPECT_LT(t.intermediate.size(), 30u) << "the command ran to the end";
    ASSERT_TRUE(t.value);
    EXPECT_EQ(*t.value, t.params.at("x"));  // a pruned trial keeps its last intermediate value
  }
  EXPECT_GT(pruned, 0) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

TEST(HpoCli, RaisingTrialFailsAndIsRetriedOnlyWhenConfigured) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "fail", "failure_backoff_s: 0.01\n");
  auto r = test::run_ftune("hpo run --config " + cfg + " --trials 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // its trials failed
  EXPECT_NE(r.output.find("2 of this worker's 2 trials failed"), std::string::npos) << r.output;
  auto storage = open_storage(db);
  auto trials = storage->trials(storage->find_study("demo")->id);
  ASSERT_EQ(trials.size(), 2u);
  for (const Trial& t : trials) {
    EXPECT_EQ(t.state, TrialState::Failed);
    EXPECT_NE(t.error.find("exited with status 3"), std::string::npos) << t.error;
  }
  write_config(dir.path(), db, "fail", "retry_failed: true\nfailure_backoff_s: 0.01\n");
  r = test::run_ftune("hpo run --config " + cfg + " --study again --trials 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  trials = storage->trials(storage->find_study("again")->id);
  ASSERT_EQ(trials.size(), 4u);  // two trials and one retry of each (retries: 1)
  EXPECT_EQ(trials[2].retry_of + trials[3].retry_of, 0 + 1);
}

TEST(HpoCli, TimeoutStopsStartingTrials) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "prune");  // ~0.4 s per trial
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_ftune("hpo run --config " + cfg + " --timeout 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  auto storage = open_storage(db);
  const auto trials = storage->trials(storage->find_study("demo")->id);
  EXPECT_GE(trials.size(), 1u);
  for (const Trial& t : trials) EXPECT_EQ(t.state, TrialState::Complete);
}

TEST(HpoCli, ExampleSearchRuns) {
  test::TempDir dir;
  const std::string db = dir.path() + "/toy.db";
  const std::string cmd = fmt::format(
      "cd {} && {} hpo run --config examples/hpo/search.yaml --storage {} --trials 6 "
      "2>&1",
      test::source_dir(), test::ftune_binary(), db);
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto storage = open_storage(db);
  const auto trials = storage->trials(storage->find_study("toy")->id);
  ASSERT_EQ(trials.size(), 6u);
  for (const Trial& t : trials) {
    EXPECT_TRUE(t.state == TrialState::Complete || t.state == TrialState::Pruned) << t.error;
    EXPECT_EQ(t.params.size(), 3u);
  }
}

TEST(HpoCli, BadInputExitsWithTwoAndSaysWhy) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string db = dir.path() + "/study.db";
  const std::string cfg = write_config(dir.path(), db, "slow", "unknown_key: 1\n");
  auto r = test::run_ftune("hpo run --config " + cfg);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("search.yaml:12: unknown key 'unknown_key'"), std::string::npos)
      << r.output;

  write_config(dir.path(), db, "slow");
  r = test::run_ftune("hpo run --config " + cfg +
                      " --storage 'postgresql://ftune@127.0.0.1:1/x?connect_timeout=2'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot connect to PostgreSQL"), std::string::npos) << r.output;

  r = test::run_ftune("hpo run --config " + cfg + " --trials 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string text = io::read_file(cfg);
  text.replace(text.find("high: 3}"), 8, "high: 4}");
  io::write_file_atomic(cfg, text);
  r = test::run_ftune("hpo run --config " + cfg + " --trials 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("different search space"), std::string::npos) << r.output;

  r = test::run_ftune("hpo status --storage " + db + " --study nope");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no study named 'nope'"), std::string::npos) << r.output;
}

// `hpo run --device cuda:K`: several workers on one machine each take their own GPU; every trial
// of the worker gets training.device (here: the command objective's arguments); a device that is
// no device is refused before any trial.
TEST(HpoCli, DeviceOptionSetsEveryTrialsDevice) {
  test::TempDir dir;
  write_objective(dir.path());
  const std::string cfg = write_config(dir.path(), "sqlite:///" + dir.path() + "/s.db", "args");
  const auto r = test::run_ftune("hpo run --config " + cfg + " --trials 2 --device cuda:3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string args = io::read_file(dir.path() + "/args");
  EXPECT_EQ(std::count(args.begin(), args.end(), '\n'), 2) << args;
  size_t found = 0;
  for (size_t at = 0; (at = args.find("--training.device=cuda:3", at)) != std::string::npos; ++at)
    ++found;
  EXPECT_EQ(found, 2u) << args;
  const auto bad = test::run_ftune("hpo run --config " + cfg + " --trials 1 --device gpu3");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("gpu3"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace ftune::hpo
