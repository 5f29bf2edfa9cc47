// Study storage semantics, one test body per backend (SQLite file, PostgreSQL server): studies and
// their spaces, trial numbers under concurrency, params and reports round trips, the incremental
// "finished since" feed, the trial budget, stale trials failed and retried, errors for bad URLs.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <chrono>

#include <cmath>
#include <set>
#include <thread>

#include "core/error.h"
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
  EXPECT_TRUE(storage_->finish(t0->id, TrialState::Complete, 0.8, ""));
  EXPECT_FALSE(storage_->finish(t0->id, TrialState::Failed, std::nullopt, "again"));
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
  EXPECT_TRUE(storage_->finish(t1->id, TrialState::Failed, std::nullopt, "objective raised"));
  EXPECT_EQ(storage_->trial(t1->id)->error, "objective raised");
  auto counts = storage_->count_by_state(s);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Complete)], 1);
  EXPECT_EQ(counts[static_cast<int>(TrialState::Failed)], 1);
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
  EXPECT_FALSE(storage_->finish(t->id, TrialState::Complete, 1.0, ""));
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
  auto all = storage_->trials(s);
  ASSERT_EQ(all.size(), 2u);
  for (const auto& x : all) EXPECT_EQ(x.state, TrialState::Failed);
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
  // A plain path and the sqlite:/// form open the same file.
  open_storage(dir.path() + "/a.db")->create_or_load_study("x", Direction::Minimize, {});
  EXPECT_TRUE(open_storage("sqlite:///" + dir.path() + "/a.db")->find_study("x"));
}

}  // namespace
}  // namespace ftune::hpo
