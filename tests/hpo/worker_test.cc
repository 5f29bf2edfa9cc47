// The worker loop in process: two workers on one SQLite study, each with its own sampler. Every
// finished trial reaches each sampler exactly once (incremental feed), samplers see the other
// worker's running trial (constant liar input), pruned trials keep their last value, and an
// objective that raises fails its trial with the message. TPE samplers of two workers, whose
// incremental above-trial index is fed from the storage's deltas in each worker's own order,
// and a sampler rebuilt from storage (a restart) agree once they have seen the same trials. A
// worker whose trial another worker failed as stale while it stalled stores nothing more of it
// and logs what it discarded. A worker gives up after max_consecutive_failures failures in a row
// with the same error (numbers aside); a trial past trial_timeout_s is asked to stop and fails
// with that reason, and one that does not stop loses its heartbeat kill_grace_s later. A pruner's
// bounds in a study with folds see the worker's fold values: a trial slow in fold 0's first
// evaluation goes on, a fold that ended collapsed stops the trial there.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "hpo/pruner.h"
#include "hpo/storage.h"
#include "hpo/worker.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

// Wraps a real sampler and records what the worker hands it.
class RecordingSampler : public Sampler {
 public:
  explicit RecordingSampler(std::unique_ptr<Sampler> inner) : inner_(std::move(inner)) {}
  void observe(const Trial& t) override {
    observed.push_back(t.number);
    EXPECT_TRUE(t.finished());
    inner_->observe(t);
  }
  Params sample(const SearchSpace& space, int64_t number,
                const std::vector<Trial>& running) override {
    for (const Trial& t : running) {
      EXPECT_NE(t.number, number) << "the trial being sampled is not a running 'other'";
      EXPECT_EQ(t.state, TrialState::Running);
    }
    if (!running.empty()) ++saw_running;
    return inner_->sample(space, number, running);
  }
  std::vector<int64_t> observed;
  int saw_running = 0;

 private:
  std::unique_ptr<Sampler> inner_;
};

// Trial number % 5: 0 raises, 1 is pruned after step 2, others complete with x after 3 reports.
class ScriptedObjective : public Objective {
 public:
  double run(const Trial& t, const SearchSpace&, TrialReporter& r) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    if (t.number % 5 == 0) throw std::runtime_error("diverged");
    for (int step = 0; step < 3; ++step) {
      if (r.report(step, t.params.at("x") + step)) throw TrialPruned();
      if (t.number % 5 == 1 && step == 2) throw TrialPruned();
    }
    return t.params.at("x");
  }
};

TEST(Worker, TwoWorkersShareAStudy) {
  test::TempDir dir;
  const std::string url = dir.path() + "/study.db";
  const SearchSpace space =
      SearchSpace::parse(YAML::Load("{x: {type: float, low: 0, high: 1}}"), "test");
  const StudyInfo study =
      open_storage(url)->create_or_load_study("w", Direction::Minimize, space.to_json());
  constexpr int kTrials = 30;
  WorkerOptions o;
  o.max_trials = kTrials;
  o.heartbeat_s = 0.05;
  o.grace_s = 5;
  o.failure_backoff_s = 0.001;
  std::vector<std::unique_ptr<RecordingSampler>> samplers;
  std::vector<WorkerStats> stats(2);
  for (int i = 0; i < 2; ++i)
    samplers.push_back(std::make_unique<RecordingSampler>(
        make_sampler(YAML::Load("{type: random}"), "test", Direction::Minimize, 1)));
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      auto storage = open_storage(url);
      ScriptedObjective objective;
      stats[i] = Worker(*storage, study, space, *samplers[i], nullptr, objective, o).run();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(stats[0].total() + stats[1].total(), kTrials);
  EXPECT_EQ(stats[0].failed + stats[1].failed, kTrials / 5);
  EXPECT_EQ(stats[0].pruned + stats[1].pruned, kTrials / 5);
  for (const auto& s : samplers) {
    const std::set<int64_t> distinct(s->observed.begin(), s->observed.end());
    EXPECT_EQ(distinct.size(), s->observed.size()) << "a trial was fed to a sampler twice";
    EXPECT_GT(s->observed.size(), kTrials / 2u);  // fed what finished before each of its trials
  }
  EXPECT_GT(samplers[0]->saw_running + samplers[1]->saw_running, 0);
  auto storage = open_storage(url);
  for (const Trial& t : storage->trials(study.id)) {
    ASSERT_TRUE(t.finished());
    switch (t.number % 5) {
      case 0:
        EXPECT_EQ(t.state, TrialState::Failed);
        EXPECT_EQ(t.error, "diverged");
        break;
      case 1:
        EXPECT_EQ(t.state, TrialState::Pruned);
        EXPECT_EQ(t.value, t.params.at("x") + 2);  // its last intermediate value
        break;
      default:
        EXPECT_EQ(t.state, TrialState::Complete);
        EXPECT_EQ(t.value, t.params.at("x"));
        EXPECT_EQ(t.intermediate.size(), 3u);
    }
  }
}

TEST(Worker, TpeSummariesOfTwoWorkersAndARestartAgree) {
  test::TempDir dir;
  const std::string url = dir.path() + "/study.db";
  const SearchSpace space = SearchSpace::parse(
      YAML::Load("{x: {type: float, low: 0, high: 1}, y: {type: float, low: -1, high: 1}}"),
      "test");
  const StudyInfo study =
      open_storage(url)->create_or_load_study("w", Direction::Minimize, space.to_json());
  WorkerOptions o;
  o.max_trials = 60;
  o.heartbeat_s = 0.05;
  o.grace_s = 5;
  o.failure_backoff_s = 0.001;
  // Few summary kernels, so the index is in use for most of the study.
  const char* cfg = "{type: tpe, n_startup_trials: 5, max_above_kernels: 6}";
  std::vector<std::unique_ptr<Sampler>> samplers;
  for (int i = 0; i < 2; ++i)
    samplers.push_back(make_sampler(YAML::Load(cfg), "test", Direction::Minimize, 3));
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      auto storage = open_storage(url);
      ScriptedObjective objective;
      Worker(*storage, study, space, *samplers[i], nullptr, objective, o).run();
    });
  for (auto& t : threads) t.join();
  // Each worker's next catch-up, and a restart fed the whole study at once.
  const std::vector<Trial> trials = open_storage(url)->trials(study.id);
  auto restarted = make_sampler(YAML::Load(cfg), "test", Direction::Minimize, 3);
  for (const Trial& t : trials) {
    if (!t.finished()) continue;
    for (auto& s : samplers) s->observe(t);  // trials a sampler has seen are skipped
    restarted->observe(t);
  }
  for (int64_t number = 100; number < 103; ++number) {
    const Params p = restarted->sample(space, number, {});
    EXPECT_EQ(samplers[0]->sample(space, number, {}), p);
    EXPECT_EQ(samplers[1]->sample(space, number, {}), p);
  }
}

// Trial 0 stalls (as a process stalls in a long evaluation) until released; then, by `late`,
// returns 1.0 (its result comes late) or reports fold 0 (a report comes late). Other trials
// complete with 3.0.
class StallingObjective : public Objective {
 public:
  enum class Late { Result, Report };
  explicit StallingObjective(Late late) : late_(late) {}
  double run(const Trial& t, const SearchSpace&, TrialReporter& r) override {
    if (t.number != 0) return 3.0;
    std::unique_lock lock(mutex_);
    started_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    if (late_ == Late::Report && r.report_fold(0, 1.0)) throw TrialPruned();
    return 1.0;
  }
  void wait_started() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return started_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  Late late_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool started_ = false, released_ = false;
};

// Worker A's trial 0 stalls; meanwhile another worker (driven here through its own storage
// handle) finds it stale, fails it and runs its retry, trial 1, to the end. Then A wakes up.
void late_worker(StallingObjective::Late late) {
  test::TempDir dir;
  const std::string url = dir.path() + "/study.db";
  const SearchSpace space =
      SearchSpace::parse(YAML::Load("{x: {type: float, low: 0, high: 1}}"), "test");
  const StudyInfo study =
      open_storage(url)->create_or_load_study("w", Direction::Minimize, space.to_json());
  WorkerOptions o;
  o.max_trials = 1;
  o.heartbeat_s = 600;  // A's heartbeat thread stays quiet; staleness is made below
  o.grace_s = 1200;
  auto log = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*log);
  spdlog::default_logger()->sinks().push_back(sink);
  RecordingSampler sampler(
      make_sampler(YAML::Load("{type: random}"), "test", Direction::Minimize, 1));
  StallingObjective objective(late);
  WorkerStats stats;
  std::thread a([&] {
    auto storage = open_storage(url);
    stats = Worker(*storage, study, space, sampler, nullptr, objective, o).run();
  });
  // Wakes A and waits for it, also when an assertion below returns early.
  struct WakeAndJoin {
    StallingObjective& objective;
    std::thread& thread;
    std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink;
    ~WakeAndJoin() {
      objective.release();
      if (thread.joinable()) thread.join();
      spdlog::default_logger()->flush();
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    }
  };
  std::unique_ptr<WakeAndJoin> wake_and_join(new WakeAndJoin{objective, a, sink});
  objective.wait_started();
  auto other = open_storage(url);
  const Trial original = other->running_trials(study.id).at(0);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(url.c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE trials SET heartbeat = heartbeat - 3600", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  ASSERT_EQ(other->fail_stale(study.id, o.grace_s, 1), 1);
  auto retry = other->start_trial(study.id, o.max_trials);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->retry_of, 0);
  EXPECT_EQ(retry->params, original.params);
  other->finish(retry->id, TrialState::Complete, 2.0, "");
  wake_and_join.reset();  // A wakes up late

  EXPECT_EQ(stats.discarded, 1);
  EXPECT_EQ(stats.total(), 0);
  const std::string text = log->str();
  const std::string what = late == StallingObjective::Late::Result
                               ? "trial 0: its result (COMPLETE, value 1) was discarded: "
                               : "trial 0: its report of fold 0 (value 1) was discarded: ";
  EXPECT_NE(text.find(what + "the trial was failed as stale at "), std::string::npos) << text;
  EXPECT_NE(text.find("and retried as trial 1"), std::string::npos) << text;
  const auto trials = other->trials(study.id);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].state, TrialState::Failed);
  EXPECT_FALSE(trials[0].value);
  EXPECT_TRUE(trials[0].fold_values.empty());
  EXPECT_TRUE(trials[0].intermediate.empty());
  EXPECT_EQ(trials[1].state, TrialState::Complete);
  EXPECT_EQ(trials[1].value, 2.0);
  // A's sampler saw no trial twice.
  const std::set<int64_t> distinct(sampler.observed.begin(), sampler.observed.end());
  EXPECT_EQ(distinct.size(), sampler.observed.size());
}

// Raises `errors[number % errors.size()]` with the trial number in the message.
class FailingObjective : public Objective {
 public:
  explicit FailingObjective(std::vector<std::string> errors) : errors_(std::move(errors)) {}
  double run(const Trial& t, const SearchSpace&, TrialReporter&) override {
    throw std::runtime_error(fmt::format("trial {}: {} in run-{}", t.number,
                                         errors_[t.number % errors_.size()], t.number * 7));
  }

 private:
  std::vector<std::string> errors_;
};

TEST(Worker, GivesUpAfterConsecutiveFailuresWithTheSameError) {
  test::TempDir dir;
  const std::string url = dir.path() + "/study.db";
  const SearchSpace space =
      SearchSpace::parse(YAML::Load("{x: {type: float, low: 0, high: 1}}"), "test");
  auto storage = open_storage(url);
  WorkerOptions o;
  o.heartbeat_s = 0.05;
  o.grace_s = 5;
  o.max_consecutive_failures = 4;
  o.failure_backoff_s = 0.001;
  auto sampler = make_sampler(YAML::Load("{type: random}"), "test", Direction::Minimize, 1);
  // The same error (numbers differ): the worker stops after 4, although the budget is unlimited.
  const StudyInfo same =
      storage->create_or_load_study("same", Direction::Minimize, space.to_json());
  FailingObjective oom({"out of memory"});
  WorkerStats stats = Worker(*storage, same, space, *sampler, nullptr, oom, o).run();
  EXPECT_EQ(stats.failed, 4);
  EXPECT_NE(stats.gave_up.find("4 trials in a row failed with the same error "
                               "(max_consecutive_failures: 4); the last: trial 3: out of memory "
                               "in run-21"),
            std::string::npos)
      << stats.gave_up;
  // Alternating errors are not "the same error": the budget ends the run.
  const StudyInfo mixed =
      storage->create_or_load_study("mixed", Direction::Minimize, space.to_json());
  FailingObjective two({"out of memory", "disk full"});
  o.max_trials = 10;
  stats = Worker(*storage, mixed, space, *sampler, nullptr, two, o).run();
  EXPECT_EQ(stats.failed, 10);
  EXPECT_TRUE(stats.gave_up.empty()) << stats.gave_up;
}

// Runs until asked to stop (polling, as objectives do), then raises; or, `stubborn`, ignores the
// request and sleeps `stubborn_s`.
class SlowObjective : public Objective {
 public:
  explicit SlowObjective(double stubborn_s = 0) : stubborn_s_(stubborn_s) {}
  double run(const Trial&, const SearchSpace&, TrialReporter& r) override {
    if (stubborn_s_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(stubborn_s_));
      return 1.0;
    }
    r.report(0, 0.5);
    while (!r.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    throw std::runtime_error("stopped");
  }

 private:
  double stubborn_s_;
};

TEST(Worker, TrialTimeoutStopsTheTrialAndFailsIt) {
  test::TempDir dir;
  const std::string url = dir.path() + "/study.db";
  const SearchSpace space =
      SearchSpace::parse(YAML::Load("{x: {type: float, low: 0, high: 1}}"), "test");
  auto storage = open_storage(url);
  const StudyInfo study = storage->create_or_load_study("t", Direction::Minimize, space.to_json());
  WorkerOptions o;
  o.max_trials = 1;
  o.heartbeat_s = 0.05;
  o.grace_s = 0.5;
  o.trial_timeout_s = 0.3;
  auto sampler = make_sampler(YAML::Load("{type: random}"), "test", Direction::Minimize, 1);
  SlowObjective slow;
  const auto t0 = std::chrono::steady_clock::now();
  const WorkerStats stats = Worker(*storage, study, space, *sampler, nullptr, slow, o).run();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(stats.failed, 1);
  const Trial t = storage->trials(study.id).at(0);
  EXPECT_EQ(t.state, TrialState::Failed);
  EXPECT_EQ(t.error, "trial_timeout_s: the trial ran for more than 0.3 s and was stopped");
  EXPECT_EQ(t.intermediate.size(), 1u);
}

// An objective that does not stop (a hung trial) keeps its heartbeat only until kill_grace_s
// after the timeout: then another worker fails it as stale, and this one's late result is
// discarded.
TEST(Worker, ATrialThatDoesNotStopLosesItsHeartbeat) {
  test::TempDir dir;
  const std::string url = dir.path() + "/study.db";
  const SearchSpace space =
      SearchSpace::parse(YAML::Load("{x: {type: float, low: 0, high: 1}}"), "test");
  const StudyInfo study =
      open_storage(url)->create_or_load_study("t", Direction::Minimize, space.to_json());
  WorkerOptions o;
  o.max_trials = 1;
  o.heartbeat_s = 0.05;
  o.grace_s = 0.3;
  o.trial_timeout_s = 0.1;
  o.kill_grace_s = 0.1;
  WorkerStats stats;
  std::thread a([&] {
    auto storage = open_storage(url);
    auto sampler = make_sampler(YAML::Load("{type: random}"), "test", Direction::Minimize, 1);
    SlowObjective hung(/*stubborn_s=*/2.5);
    stats = Worker(*storage, study, space, *sampler, nullptr, hung, o).run();
  });
  // Its heartbeats stop 0.2 s after the trial starts; 1.2 s in, the trial is stale by far
  // (grace 0.3 s). Without the timeout its heartbeat would keep it alive for all of its 2.5 s.
  auto other = open_storage(url);
  const auto t0 = std::chrono::steady_clock::now();
  while (other->running_trials(study.id).empty() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_EQ(other->fail_stale(study.id, o.grace_s, 0), 1);
  a.join();
  EXPECT_EQ(stats.discarded, 1);
  const Trial t = other->trials(study.id).at(0);
  EXPECT_EQ(t.state, TrialState::Failed);
  EXPECT_NE(t.error.find("no heartbeat"), std::string::npos) << t.error;
}

TEST(Worker, LateResultOfATrialFailedAsStaleIsDiscardedAndLogged) {
  late_worker(StallingObjective::Late::Result);
}

TEST(Worker, LateReportOfATrialFailedAsStaleStopsItAndIsLogged) {
  late_worker(StallingObjective::Late::Report);
}

// Three folds of two evaluations each, reported as a train_config objective reports them
// (fold_reports: evaluations): the running mean with each evaluation, the fold's best at its end.
// Trial 0 predicts one class at its first evaluation of each fold (F1 0) and learns by the second
// (0.6); trial 1 stays collapsed (0.0, 0.05).
class FoldEvaluationsObjective : public Objective {
 public:
  double run(const Trial& t, const SearchSpace&, TrialReporter& r) override {
    const double evals[2] = {0.0, t.number == 0 ? 0.6 : 0.05};
    double sum = 0;
    int64_t step = 0;
    for (int fold = 0; fold < 3; ++fold) {
      for (double v : evals) {
        step += 100;
        if (r.report(step, (sum + v) / (fold + 1))) throw TrialPruned();
      }
      sum += evals[1];
      if (r.report_fold(fold, evals[1], step)) throw TrialPruned();
    }
    return sum / 3;
  }
};

TEST(Worker, BoundsWithFoldsSeeTheFoldValues) {
  test::TempDir dir;
  auto storage = open_storage(dir.path() + "/study.db");
  const SearchSpace space =
      SearchSpace::parse(YAML::Load("{x: {type: float, low: 0, high: 1}}"), "test");
  const StudyInfo study =
      storage->create_or_load_study("bounds", Direction::Maximize, space.to_json());
  auto sampler = make_sampler(YAML::Load("{type: random}"), "test", Direction::Maximize, 1);
  auto pruner = make_pruner(YAML::Load("{type: median, n_startup_trials: 3, lower: 0.2}"),
                            "pruner", Direction::Maximize, "bounds", 3);
  WorkerOptions o;
  o.max_trials = 2;
  o.heartbeat_s = 0.05;
  o.grace_s = 5;
  FoldEvaluationsObjective objective;
  const WorkerStats stats = Worker(*storage, study, space, *sampler, pruner.get(), objective, o).run();
  EXPECT_EQ(stats.complete, 1);
  EXPECT_EQ(stats.pruned, 1);
  for (const Trial& t : storage->trials(study.id)) {
    if (t.number == 0) {
      EXPECT_EQ(t.state, TrialState::Complete);  // its F1-0 evaluations were inside its folds
      EXPECT_EQ(t.fold_values.size(), 3u);
    } else {
      EXPECT_EQ(t.state, TrialState::Pruned);  // at fold 0's end: its value 0.05
      EXPECT_EQ(t.fold_values.size(), 1u);
      EXPECT_EQ(t.intermediate.rbegin()->first, 200);
    }
  }
}

}  // namespace
}  // namespace ftune::hpo
