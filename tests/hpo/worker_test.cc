// The worker loop in process: two workers on one SQLite study, each with its own sampler. Every
// finished trial reaches each sampler exactly once (incremental feed), samplers see the other
// worker's running trial (constant liar input), pruned trials keep their last value, and an
// objective that raises fails its trial with the message.
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

}  // namespace
}  // namespace ftune::hpo
