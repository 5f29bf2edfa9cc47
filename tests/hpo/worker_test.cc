// The worker loop in process: two workers on one SQLite study, each with its own sampler. Every
// finished trial reaches each sampler exactly once (incremental feed), samplers see the other
// worker's running trial (constant liar input), pruned trials keep their last value, and an
// objective that raises fails its trial with the message. TPE samplers of two workers, whose
// incremental above-trial index is fed from the storage's deltas in each worker's own order,
// and a sampler rebuilt from storage (a restart) agree once they have seen the same trials.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

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

}  // namespace
}  // namespace ftune::hpo
