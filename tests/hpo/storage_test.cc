// Study storage semantics, one test body per backend (SQLite file, PostgreSQL server): studies and
// their spaces, trial numbers under concurrency, params and reports round trips, the incremental
// "finished since" feed, the trial budget, stale trials failed and retried, the late writes of a
// stalled worker whose trial was failed as stale (refused, saying why; the retry's result is the
// only one), errors for bad URLs.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <chrono>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "hpo/postgres_connection.h"
#include "hpo/sqlite_connection.h"
#include "hpo/storage.h"
#include "pg_server.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

using test::PgServer;

nlohmann::json space_a() {
  return {{"params", {{{"name", "lr"}, {"low", 1e-5}, {"high", 1e-3}, {"log", true}}}}};
}

class StorageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      url_ = "sqlite:///" + dir_.path() + "/study.db";
    } else {
      std::string why;
      PgServer* pg = PgServer::shared(&why);
      if (!pg) GTEST_SKIP() << why;
      url_ = pg->fresh_database_url();
    }
    storage_ = open_storage(url_);
  }
  // Moves a trial's last heartbeat `seconds` into the past, as if its worker had stalled that
  // long: makes it stale for fail_stale without sleeping.
  void age_heartbeat(int64_t trial_id, double seconds) {
    std::unique_ptr<SqlConnection> c;
    if (GetParam() == "sqlite")
      c = std::make_unique<SqliteConnection>(dir_.path() + "/study.db");
    else
      c = std::make_unique<PostgresConnection>(url_);
    c->exec("UPDATE trials SET heartbeat = heartbeat - $2 WHERE id = $1", {trial_id, seconds});
  }
  test::TempDir dir_;
  std::string url_;
  std::unique_ptr<Storage> storage_;
};

TEST_P(StorageTest, StudyIsCreatedOnceAndRefusesAnotherSpaceOrDirection) {
  const StudyInfo a = storage_->create_or_load_study("s", Direction::Minimize, space_a());
  const StudyInfo again =
      open_storage(url_)->create_or_load_study("s", Direction::Minimize, space_a());
  EXPECT_EQ(a.id, again.id);
  EXPECT_EQ(again.space, space_a());
  nlohmann::json other = space_a();
  other["params"][0]["high"] = 1e-2;
  try {
    storage_->create_or_load_study("s", Direction::Minimize, other);
    FAIL() << "a different space was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("different search space"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/params/0/high"), std::string::npos) << e.what();
  }
  EXPECT_THROW(storage_->create_or_load_study("s", Direction::Maximize, space_a()), InputError);
  EXPECT_FALSE(storage_->find_study("nope"));
  ASSERT_TRUE(storage_->find_study("s"));
  EXPECT_EQ(storage_->studies().size(), 1u);
}

TEST_P(StorageTest, TrialRoundTrip) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Maximize, space_a()).id;
  auto t0 = storage_->start_trial(s);
  auto t1 = storage_->start_trial(s);
  ASSERT_TRUE(t0 && t1);
  EXPECT_EQ(t0->number, 0);
  EXPECT_EQ(t1->number, 1);
  EXPECT_EQ(t0->state, TrialState::Running);
  Distribution lr{Distribution::Kind::Float, 1e-5, 1e-3, true, 0, {}};
  Distribution opt{Distribution::Kind::Categorical, 0, 1, false, 0, {"adamw", "sgd"}};
  storage_->set_params(t0->id, {{"lr", 3e-4}, {"opt", 1}}, {{"lr", lr}, {"opt", opt}});
  storage_->report_intermediate(t0->id, 0, 0.5);
  storage_->report_intermediate(t0->id, 1, std::nan(""));
  storage_->report_intermediate(t0->id, 2, 0.25);
  storage_->report_intermediate(t0->id, 2, 0.125);  // a step reported again keeps the last value
  storage_->report_fold(t0->id, 0, 0.7);
  storage_->report_fold(t0->id, 1, 0.9);
  storage_->finish(t0->id, TrialState::Complete, 0.8, "");
  try {
    storage_->finish(t0->id, TrialState::Failed, std::nullopt, "again");
    FAIL() << "a finished trial was finished again";
  } catch (const TrialNotRunning& e) {
    EXPECT_EQ(e.state, TrialState::Complete);
    EXPECT_NE(std::string(e.what()).find(
                  "trial 0: its result (FAIL: again) was discarded: the trial had already ended "
                  "COMPLETE at 20"),
              std::string::npos)
        << e.what();
  }
  auto t = storage_->trial(t0->id);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state, TrialState::Complete);
  EXPECT_EQ(t->value, 0.8);
  EXPECT_EQ(t->params.at("lr"), 3e-4);
  EXPECT_EQ(t->params.at("opt"), 1);
  EXPECT_EQ(t->distributions.at("lr"), lr);
  EXPECT_EQ(t->distributions.at("opt"), opt);
  ASSERT_EQ(t->intermediate.size(), 3u);
  EXPECT_EQ(t->intermediate.at(0), 0.5);
  EXPECT_TRUE(std::isnan(t->intermediate.at(1)));
  EXPECT_EQ(t->intermediate.at(2), 0.125);
  EXPECT_EQ(t->fold_values, (std::map<int64_t, double>{{0, 0.7}, {1, 0.9}}));
  EXPECT_GT(t->end_time, 0);
  EXPECT_GE(t->end_time, t->start_time);
  storage_->finish(t1->id, TrialState::Failed, std::nullopt, "objective raised");
  EXPECT_EQ(storage_->trial(t1->id)->error, "objective raised");
  auto counts = storage_->count_by_state(s);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Complete)], 1);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Failed)], 1);
}

// Attributes (a retry records how it resumed): stored as JSON, replaced by key, loaded with the
// trial; like every write of a worker, refused once the trial has ended.
TEST_P(StorageTest, AttributesRoundTripAndAreRefusedOnceTheTrialEnded) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Maximize, space_a()).id;
  auto t0 = storage_->start_trial(s);
  auto t1 = storage_->start_trial(s);
  ASSERT_TRUE(t0 && t1);
  storage_->set_attr(t1->id, "resumed", {{"from_trial", 0}, {"folds_reused", {0}}});
  storage_->set_attr(t1->id, "resumed", {{"from_trial", 0}, {"folds_reused", {0, 1}}});
  storage_->set_attr(t1->id, "note", "text");
  const auto t = storage_->find_trial(s, 1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->id, t1->id);
  EXPECT_EQ(t->attrs, nlohmann::json({{"note", "text"},
                                      {"resumed", {{"from_trial", 0}, {"folds_reused", {0, 1}}}}}));
  EXPECT_EQ(storage_->trial(t0->id)->attrs, nlohmann::json::object());
  EXPECT_FALSE(storage_->find_trial(s, 7));
  storage_->finish(t1->id, TrialState::Complete, 0.5, "");
  EXPECT_THROW(storage_->set_attr(t1->id, "late", 1), TrialNotRunning);
  EXPECT_EQ(storage_->trials(s).at(1).attrs.size(), 2u);
}

// `hpo status|best|export` open an existing storage only: a database without ftune's tables is
// refused and left as it was.
TEST_P(StorageTest, OpeningAnExistingStorageCreatesNothing) {
  if (GetParam() == "sqlite") {
    const std::string missing = dir_.path() + "/missing.db";
    try {
      open_storage("sqlite:///" + missing, StorageAccess::reader());
      FAIL() << "opened a missing file";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(missing + ": no such study storage"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(missing));
  } else {
    std::string why;
    const std::string empty = PgServer::shared(&why)->fresh_database_url();
    try {
      open_storage(empty, StorageAccess::reader());
      FAIL() << "opened a database without ftune's tables";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("holds no ftune study"), std::string::npos) << e.what();
    }
    auto c = std::make_unique<PostgresConnection>(empty);
    EXPECT_TRUE(c->exec("SELECT table_name FROM information_schema.tables WHERE table_schema = "
                        "current_schema()",
                        {})
                    .empty());
  }
  storage_->create_or_load_study("s", Direction::Minimize, space_a());
  EXPECT_TRUE(open_storage(url_, StorageAccess::reader())->find_study("s"));
}

// A reader (`hpo status`, `ftune report|dashboard`) writes nothing through its storage, and a
// database another process keeps under an exclusive lock is an error within the reader's wait,
// not minutes of retries; once the lock is released the same read succeeds.
TEST_P(StorageTest, ReaderWritesNothingAndGivesUpOnALockedDatabase) {
  storage_->create_or_load_study("s", Direction::Minimize, space_a());
  {
    auto reader = open_storage(url_, StorageAccess::reader(0.5));
    EXPECT_THROW(reader->create_or_load_study("t", Direction::Minimize, space_a()), InternalError);
    EXPECT_EQ(storage_->studies().size(), 1u);
  }
  if (GetParam() != "sqlite") return;
  storage_.reset();  // SQLite's exclusive locking mode waits for every other connection to close
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() + "/study.db").c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder,
                         "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; "
                         "UPDATE trials SET number = number WHERE 0;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(holder);
  const auto start = std::chrono::steady_clock::now();
  try {
    open_storage(url_, StorageAccess::reader(0.5))->studies();
    ADD_FAILURE() << "read a database under another process's exclusive lock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("study.db: the study database is locked by another "
                                         "process"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ(open_storage(url_, StorageAccess::reader(0.5))->studies().size(), 1u);
}

TEST_P(StorageTest, FinishedSinceReturnsEachTrialOnceInFinishOrder) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  std::vector<Trial> t;
  for (int i = 0; i < 4; ++i) t.push_back(*storage_->start_trial(s));
  storage_->finish(t[2].id, TrialState::Complete, 2.0, "");
  storage_->finish(t[0].id, TrialState::Pruned, std::nullopt, "");
  FinishedBatch b = storage_->finished_since(s, 0);
  ASSERT_EQ(b.trials.size(), 2u);
  EXPECT_EQ(b.trials[0].number, 2);
  EXPECT_EQ(b.trials[1].number, 0);
  EXPECT_TRUE(storage_->finished_since(s, b.cursor).trials.empty());
  storage_->finish(t[3].id, TrialState::Complete, 3.0, "");
  FinishedBatch c = storage_->finished_since(s, b.cursor);
  ASSERT_EQ(c.trials.size(), 1u);
  EXPECT_EQ(c.trials[0].number, 3);
  EXPECT_EQ(storage_->running_trials(s).size(), 1u);
}

TEST_P(StorageTest, BudgetStopsNewTrials) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(storage_->start_trial(s, 3));
  EXPECT_FALSE(storage_->start_trial(s, 3));
  EXPECT_TRUE(storage_->start_trial(s, 4));
}

TEST_P(StorageTest, StaleTrialIsFailedAndRetriedUpToTheLimit) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  auto t = storage_->start_trial(s, 1);
  Distribution lr{Distribution::Kind::Float, 1e-5, 1e-3, true, 0, {}};
  storage_->set_params(t->id, {{"lr", 1e-4}}, {{"lr", lr}});
  EXPECT_EQ(storage_->fail_stale(s, 0.3, 1), 0);  // fresh heartbeat
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(storage_->fail_stale(s, 0.3, 1), 1);
  auto failed = storage_->trial(t->id);
  EXPECT_EQ(failed->state, TrialState::Failed);
  EXPECT_NE(failed->error.find("no heartbeat"), std::string::npos) << failed->error;
  EXPECT_FALSE(storage_->heartbeat(t->id));
  EXPECT_THROW(storage_->finish(t->id, TrialState::Complete, 1.0, ""), TrialNotRunning);
  // The retry is claimed first, even though the budget of 1 trial is used up by the original.
  auto retry = storage_->start_trial(s, 1);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->number, 1);
  EXPECT_EQ(retry->retry_of, 0);
  EXPECT_EQ(retry->params.at("lr"), 1e-4);
  EXPECT_TRUE(storage_->heartbeat(retry->id));
  EXPECT_FALSE(storage_->start_trial(s, 1));
  // The retry dies as well: failed, and not retried again (max_retries = 1).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(storage_->fail_stale(s, 0.3, 1), 1);
  EXPECT_FALSE(storage_->start_trial(s, 1));
  try {
    storage_->report_intermediate(retry->id, 0, 1.0);
    FAIL() << "a report of a failed trial was stored";
  } catch (const TrialNotRunning& e) {
    EXPECT_FALSE(e.retried_as);
    EXPECT_NE(std::string(e.what()).find("and not retried"), std::string::npos) << e.what();
  }
  auto all = storage_->trials(s);
  ASSERT_EQ(all.size(), 2u);
  for (const auto& x : all) EXPECT_EQ(x.state, TrialState::Failed);
}

// (b) A stalled worker whose trial was failed as stale wakes up and writes: nothing of it may
// reach the failed trial, which samplers, pruners and reports have already taken as final, and
// its retry must keep the params it was queued with.
TEST_P(StorageTest, WritesToATrialFailedAsStaleAreRefused) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  auto t = storage_->start_trial(s);
  Distribution lr{Distribution::Kind::Float, 1e-5, 1e-3, true, 0, {}};
  storage_->set_params(t->id, {{"lr", 1e-4}}, {{"lr", lr}});
  storage_->report_intermediate(t->id, 0, 0.5);
  age_heartbeat(t->id, 3600);
  auto other = open_storage(url_);  // the worker that finds the trial stale
  ASSERT_EQ(other->fail_stale(s, 60, 1), 1);
  const Trial failed = *other->trial(t->id);
  try {
    storage_->report_intermediate(t->id, 1, 9.0);
    FAIL() << "a report of a trial failed as stale was stored";
  } catch (const TrialNotRunning& e) {
    EXPECT_EQ(e.number, 0);
    EXPECT_EQ(e.state, TrialState::Failed);
    EXPECT_EQ(e.retried_as, 1);
    EXPECT_EQ(e.end_time, failed.end_time);
    EXPECT_NE(e.error.find("no heartbeat for more than 60 s"), std::string::npos) << e.error;
    EXPECT_NE(std::string(e.what()).find("trial 0: its report of step 1 (value 9) was discarded: "
                                         "the trial was failed as stale at 20"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("and retried as trial 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(storage_->report_fold(t->id, 0, 9.0), TrialNotRunning);
  EXPECT_THROW(storage_->set_params(t->id, {{"lr", 5e-4}}, {{"lr", lr}}), TrialNotRunning);
  EXPECT_FALSE(storage_->heartbeat(t->id));
  const Trial after = *other->trial(t->id);
  EXPECT_EQ(after.state, TrialState::Failed);
  EXPECT_EQ(after.intermediate, failed.intermediate);
  EXPECT_EQ(after.intermediate, (std::map<int64_t, double>{{0, 0.5}}));
  EXPECT_TRUE(after.fold_values.empty());
  EXPECT_EQ(after.params, failed.params);
  auto retry = other->start_trial(s);
  EXPECT_EQ(retry->retry_of, 0);
  EXPECT_EQ(retry->params, failed.params);
}

// (a) and (c): the stalled worker's result arrives while the retry is queued, while it runs and
// after it finished. Each time it is refused; the study ends with one FAIL (the original, no
// value) and one COMPLETE (the retry), each fed once to the samplers' "finished since" feed.
TEST_P(StorageTest, LateResultOfATrialFailedAsStaleIsRefusedWhateverItsRetryDoes) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  auto t = storage_->start_trial(s, 1);
  age_heartbeat(t->id, 3600);
  auto other = open_storage(url_);
  ASSERT_EQ(other->fail_stale(s, 60, 1), 1);
  FinishedBatch seen = other->finished_since(s, 0);
  ASSERT_EQ(seen.trials.size(), 1u);
  EXPECT_EQ(seen.trials[0].number, 0);
  auto late_finishes = [&](const char* when) {
    SCOPED_TRACE(when);
    for (TrialState state : {TrialState::Complete, TrialState::Pruned, TrialState::Failed}) {
      try {
        storage_->finish(t->id, state,
                         state == TrialState::Failed ? std::nullopt : std::optional(1.5),
                         state == TrialState::Failed ? "boom" : "");
        FAIL() << "a late " << to_string(state) << " was stored";
      } catch (const TrialNotRunning& e) {
        EXPECT_EQ(e.state, TrialState::Failed);
        EXPECT_EQ(e.retried_as, 1);
      }
    }
    EXPECT_TRUE(other->finished_since(s, seen.cursor).trials.empty()) << "a refused finish "
                                                                         "showed up as finished";
  };
  late_finishes("retry queued");
  auto retry = other->start_trial(s, 1);  // the budget of 1 is the retry's now
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->number, 1);
  late_finishes("retry running");
  other->report_intermediate(retry->id, 0, 2.5);
  other->finish(retry->id, TrialState::Complete, 2.0, "");
  seen = other->finished_since(s, seen.cursor);
  ASSERT_EQ(seen.trials.size(), 1u);
  EXPECT_EQ(seen.trials[0].number, 1);
  late_finishes("retry complete");
  EXPECT_FALSE(storage_->start_trial(s, 1));
  const auto all = storage_->trials(s);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].state, TrialState::Failed);
  EXPECT_FALSE(all[0].value);
  EXPECT_NE(all[0].error.find("no heartbeat"), std::string::npos) << all[0].error;
  EXPECT_EQ(all[1].state, TrialState::Complete);
  EXPECT_EQ(all[1].value, 2.0);
  EXPECT_EQ(all[1].intermediate, (std::map<int64_t, double>{{0, 2.5}}));
  const auto counts = storage_->count_by_state(s);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Complete)], 1);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Failed)], 1);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Pruned)], 0);
  // Everything fed once in all, from the start: the FAIL and the retry's COMPLETE.
  EXPECT_EQ(open_storage(url_)->finished_since(s, 0).trials.size(), 2u);
}

// Two workers that both find the trial stale: one fails it and queues one retry; the other
// changes nothing. A trial that finished before the check is left alone.
TEST_P(StorageTest, AStaleTrialIsFailedOnceAndRetriedOnce) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  auto stale = storage_->start_trial(s);
  auto done = storage_->start_trial(s);
  age_heartbeat(stale->id, 3600);
  age_heartbeat(done->id, 3600);
  storage_->finish(done->id, TrialState::Complete, 1.0, "");
  auto a = open_storage(url_), b = open_storage(url_);
  EXPECT_EQ(a->fail_stale(s, 60, 3), 1);
  EXPECT_EQ(b->fail_stale(s, 60, 3), 0);
  EXPECT_FALSE(b->enqueue_retry(stale->id, 3));  // retried already
  const auto all = storage_->trials(s);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].state, TrialState::Failed);
  EXPECT_EQ(all[1].state, TrialState::Complete);
  EXPECT_EQ(all[1].value, 1.0);
  EXPECT_EQ(all[2].state, TrialState::Waiting);
  EXPECT_EQ(all[2].retry_of, 0);
}

TEST_P(StorageTest, RaisedTrialIsRetriedOnlyWhenAsked) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  auto t = storage_->start_trial(s);
  storage_->finish(t->id, TrialState::Failed, std::nullopt, "boom");
  EXPECT_FALSE(storage_->enqueue_retry(t->id, 0));
  auto n = storage_->enqueue_retry(t->id, 2);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1);
  EXPECT_FALSE(storage_->enqueue_retry(t->id, 2));  // already retried
  auto r = storage_->start_trial(s);
  EXPECT_EQ(r->retry_of, 0);
  auto complete = storage_->start_trial(s);
  storage_->finish(complete->id, TrialState::Complete, 1.0, "");
  EXPECT_FALSE(storage_->enqueue_retry(complete->id, 2));  // only failed trials are retried
}

TEST_P(StorageTest, ConcurrentWorkersNeverShareATrialNumber) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  constexpr int kThreads = 16, kPerThread = 25, kBudget = 300;  // 16 workers, like the spec
  std::vector<std::vector<int64_t>> numbers(kThreads);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w)
    threads.emplace_back([&, w] {
      auto st = open_storage(url_);  // a connection of its own, like a worker process
      for (int i = 0; i < kPerThread; ++i) {
        auto t = st->start_trial(s, kBudget);
        if (!t) break;
        st->report_intermediate(t->id, 0, i);
        st->finish(t->id, TrialState::Complete, i, "");
        numbers[w].push_back(t->number);
      }
    });
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  size_t total = 0;
  for (const auto& v : numbers) all.insert(v.begin(), v.end()), total += v.size();
  EXPECT_EQ(total, static_cast<size_t>(kBudget));
  EXPECT_EQ(all.size(), total) << "duplicate trial numbers";
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), kBudget - 1);
  FinishedBatch b = storage_->finished_since(s, 0);
  EXPECT_EQ(b.trials.size(), static_cast<size_t>(kBudget));
}

// Workers run trials (params, four reports, finish) while a reaper fails their running trials as
// stale at random moments, as the peers of stalled workers do. Whatever the interleaving, every
// trial ends exactly once (by its worker's finish or by the stale check), each failure refuses
// exactly one write of the trial's worker, the stored reports are exactly the accepted ones, and
// every trial failed as stale has one retry with its params.
TEST_P(StorageTest, StaleChecksRacingLiveWorkersLoseNoWriteAndEndNoTrialTwice) {
  const int64_t s = storage_->create_or_load_study("s", Direction::Minimize, space_a()).id;
  // Until the reaper has failed kFailures trials and kCompleted were completed.
  constexpr int kWorkers = 6, kSteps = 4, kFailures = 20, kCompleted = 40;
  const Distribution lr{Distribution::Kind::Float, 1e-5, 1e-3, true, 0, {}};
  std::mutex mutex;                                       // guards the tallies below
  std::map<int64_t, std::map<int64_t, double>> accepted;  // trial id -> step -> value
  std::map<int64_t, double> completed;                    // trial id -> value, finish accepted
  int64_t refused = 0, failed_stale = 0;
  std::atomic<bool> stop = false;  // the workers start no further trial
  // The reaper fails every running trial at random moments: with a grace period of -3600 s
  // every heartbeat counts as stale. (The pause only spaces its rounds; nothing waits on it.)
  auto reaper_storage = open_storage(url_);  // opened before the workers contend for the file
  std::thread reaper([&] {
    Storage* st = reaper_storage.get();
    std::mt19937 rng(7);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 4000));
      const int n = st->fail_stale(s, -3600, 1);
      std::lock_guard lock(mutex);
      failed_stale += n;
      if (failed_stale >= kFailures && completed.size() >= kCompleted) break;
    }
    stop = true;
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.emplace_back([&, w] {
      auto st = open_storage(url_);
      while (!stop) {
        auto t = st->start_trial(s);
        try {
          if (t->params.empty())
            st->set_params(t->id, {{"lr", 1e-5 * (1 + t->number)}}, {{"lr", lr}});
          for (int step = 0; step < kSteps; ++step) {
            const double v = w * 1000 + t->number + 0.1 * step;
            st->report_intermediate(t->id, step, v);
            std::lock_guard lock(mutex);
            accepted[t->id][step] = v;
          }
          st->finish(t->id, TrialState::Complete, t->number + 0.5, "");
          std::lock_guard lock(mutex);
          completed[t->id] = t->number + 0.5;
        } catch (const TrialNotRunning& e) {
          EXPECT_EQ(e.state, TrialState::Failed) << e.what();
          std::lock_guard lock(mutex);
          ++refused;
        }
      }
    });
  reaper.join();
  for (auto& t : workers) t.join();
  const auto all = storage_->trials(s);
  EXPECT_EQ(refused, failed_stale);
  int64_t waiting = 0;  // retries queued after the workers stopped
  for (const Trial& t : all) waiting += t.state == TrialState::Waiting;
  EXPECT_EQ(static_cast<int64_t>(completed.size()) + failed_stale + waiting,
            static_cast<int64_t>(all.size()));
  std::map<int64_t, int> retries;  // original number -> retries of it
  for (const Trial& t : all) {
    if (t.retry_of >= 0) ++retries[t.retry_of];
    const std::map<int64_t, double> values =
        accepted.count(t.id) ? accepted.at(t.id) : std::map<int64_t, double>{};
    EXPECT_EQ(t.intermediate, values) << "trial " << t.number;
    if (completed.count(t.id)) {
      EXPECT_EQ(t.state, TrialState::Complete) << "trial " << t.number;
      EXPECT_EQ(t.value, completed.at(t.id));
    } else if (t.state != TrialState::Waiting) {
      EXPECT_EQ(t.state, TrialState::Failed) << "trial " << t.number;
      EXPECT_NE(t.error.find("no heartbeat"), std::string::npos) << t.error;
      EXPECT_FALSE(t.value);
    }
  }
  for (const Trial& t : all) {
    const bool first_attempt = t.retry_of < 0;
    if (t.state == TrialState::Failed && first_attempt)
      EXPECT_EQ(retries[t.number], 1) << "trial " << t.number;
    // A retry keeps its original's params; one failed before it had any samples its own.
    if (t.retry_of >= 0 && !all.at(t.retry_of).params.empty())
      EXPECT_EQ(t.params, all.at(t.retry_of).params) << "trial " << t.number;
  }
  const FinishedBatch fed = storage_->finished_since(s, 0);
  std::set<int64_t> numbers;
  for (const Trial& t : fed.trials) numbers.insert(t.number);
  EXPECT_EQ(static_cast<int64_t>(fed.trials.size()), static_cast<int64_t>(all.size()) - waiting);
  EXPECT_EQ(numbers.size(), fed.trials.size());
}

INSTANTIATE_TEST_SUITE_P(Backends, StorageTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST(OpenStorage, BadUrlsSayWhatIsWrong) {
  test::TempDir dir;
  EXPECT_THROW(open_storage("mysql://u@h/db"), InputError);
  EXPECT_THROW(open_storage(""), InputError);
  EXPECT_THROW(open_storage("sqlite://x.db"), InputError);
  EXPECT_THROW(open_storage(dir.path() + "/missing/dir/study.db"), InputError);
  try {
    open_storage("postgresql://ftune:secret@127.0.0.1:1/db?connect_timeout=2");
    FAIL() << "connected to port 1";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot connect to PostgreSQL"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("secret"), std::string::npos) << "password leaked: " << msg;
  }
  // A database of another program (Optuna's has a `studies` table) is refused, not modified.
  const std::string optuna_db = dir.path() + "/optuna.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(optuna_db.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE studies (study_id INTEGER PRIMARY KEY, study_name TEXT)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  try {
    open_storage(optuna_db);
    FAIL() << "opened a foreign database";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not an ftune study storage"), std::string::npos)
        << e.what();
  }
  // A file written before trial attributes existed (no trial_attrs table) is read as it is by a
  // reader, and gains the table when a writer opens it.
  {
    auto old = open_storage(dir.path() + "/v1.db");
    const int64_t s = old->create_or_load_study("x", Direction::Minimize, {}).id;
    old->finish(old->start_trial(s)->id, TrialState::Complete, 1.0, "");
  }
  ASSERT_EQ(sqlite3_open((dir.path() + "/v1.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE trial_attrs", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  {
    auto reopened = open_storage(dir.path() + "/v1.db", StorageAccess::reader());
    const auto trials = reopened->trials(reopened->find_study("x")->id);
    ASSERT_EQ(trials.size(), 1u);
    EXPECT_EQ(trials[0].value, 1.0);
  }
  open_storage(dir.path() + "/v1.db");
  ASSERT_EQ(sqlite3_open((dir.path() + "/v1.db").c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "SELECT count(*) FROM trial_attrs", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  // A plain path and the sqlite:/// form open the same file.
  open_storage(dir.path() + "/a.db")->create_or_load_study("x", Direction::Minimize, {});
  EXPECT_TRUE(open_storage("sqlite:///" + dir.path() + "/a.db")->find_study("x"));
}

}  // namespace
}  // namespace ftune::hpo
