// `ftune hpo` end to end: several worker processes on one SQLite file and on PostgreSQL (every
// trial terminal, numbers 0..N-1 once each, the SQLite file intact), a worker killed with -9
// mid-trial (its trial failed after the grace period and retried with the same params), a worker
// stopped (SIGSTOP) past the grace period whose late result is discarded and logged, kill -9
// during heavy writes (file intact, the study resumable), status/best/export, and bad input
// (exit 2 with a message naming what is wrong). Failing fast: a worker whose trials keep failing
// the same way gives up (with back-off meanwhile) and exits non-zero; trial_timeout_s stops a
// hung command's whole process group (SIGTERM, then SIGKILL); a worker killed with -9 takes its
// command along; status/best/export never create a storage.
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
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "pg_server.h"
#include "run_cli.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

using test::PgServer;

// The trial command: reads --x=, --y= and answers with an intermediate value, two folds and
// the value x^2 + y. MODE slow: sleeps briefly; heavy: 300 intermediate reports; killme: the
// first trial to run never ends (it prints a line every 0.1 s, so once its worker is dead the
// closed pipe ends it) after leaving a marker file; stall: the first trial to run leaves a marker
// file, waits for the file $DIR/go and then prints only "value 7"; hang: starts a child that
// sleeps for good (its pid in $DIR/child.pid), reports once and waits for it; stubborn: the same
// but ignoring SIGTERM (the child too), so only SIGKILL ends it.
// Polls every 20 ms until `path` exists; false after 30 s.
bool wait_for_file(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(30)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void write_objective(const std::string& dir) {
  const std::string script = R"SH(#!/bin/sh
for a in "$@"; do case $a in --x=*) x=${a#--x=};; --y=*) y=${a#--y=};; esac; done
case "$MODE" in
  slow) sleep 0.05 ;;
  fail) echo "bad things" >&2; exit 3 ;;
  prune) i=0; while [ $i -lt 30 ]; do echo "intermediate $i $x"; i=$((i+1)); sleep 0.01; done ;;
  heavy) i=0; while [ $i -lt 300 ]; do echo "intermediate $i $x"; i=$((i+1)); done ;;
  killme) if mkdir "$DIR/marker" 2>/dev/null; then echo $$ > "$DIR/marker/pid"; echo "$FTUNE_TRIAL_NUMBER" > "$DIR/marker/n"; while :; do echo tick; sleep 0.1; done; fi ;;
  stall) if mkdir "$DIR/marker" 2>/dev/null; then echo "$FTUNE_TRIAL_NUMBER" > "$DIR/marker/n"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo "value 7"; exit 0; fi ;;
  hang) sleep 1000 & echo $! > "$DIR/child.tmp"; mv "$DIR/child.tmp" "$DIR/child.pid"; echo "intermediate 0 $x"; wait ;;
  stubborn) trap '' TERM; sleep 1000 & echo $! > "$DIR/child.tmp"; mv "$DIR/child.tmp" "$DIR/child.pid"; echo "intermediate 0 $x"; while :; do sleep 0.1; done ;;
esac
echo "some log line"
echo "intermediate 0 $x"
echo "fold 0 $x"
echo "fold 1 $y"
echo "value $(awk "BEGIN{print ($x)*($x) + $y}")"
)SH";
  io::write_file_atomic(dir + "/objective.sh", script);
  std::filesystem::permissions(dir + "/objective.sh", std::filesystem::perms::owner_all);
}

// `grace_s`: how long a silent worker's trial stays RUNNING. The tests of worker death use a short
// one; the concurrency tests a long one, so a loaded machine (heartbeats delayed past the grace
// period) cannot turn live trials into retries and change the trial count they check.
std::string write_config(const std::string& dir, const std::string& storage,
                         const std::string& mode, const std::string& extra = "",
                         const std::string& grace_s = "1.5") {
  const std::string yaml =
      "study: {name: demo, direction: minimize, metric: loss}\n"
      "storage: " +
      storage +
      "\n"
      "sampler: {type: random}\n"
      "pruner: {type: none}\n"
      "space:\n"
      "  x: {type: float, low: -3, high: 3}\n"
      "  y: {type: int, low: 0, high: 4}\n"
      "objective: {command: \"MODE=" +
      mode + " DIR=" + dir + " " + dir +
      "/objective.sh\"}\n"
      "heartbeat_s: 0.2\n"
      "grace_s: " +
      grace_s +
      "\n"
      "retries: 1\n" +
      extra;
  io::write_file_atomic(dir + "/search.yaml", yaml);
  return dir + "/search.yaml";
}

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

// True when `pid` no longer runs (gone, or a zombie nobody reaped yet).
bool process_gone(int pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
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
