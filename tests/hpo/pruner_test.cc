// Pruner configuration (defaults, errors naming the key) and a few decisions by hand; every
// decision against Optuna is in pruner_golden_test.cc.
#include <gtest/gtest.h>

#include "core/error.h"
#include "hpo/percentile_pruner.h"
#include "hpo/pruner.h"
#include "hpo/successive_halving_pruner.h"

namespace ftune::hpo {
namespace {

Trial trial(int64_t number, TrialState state, std::map<int64_t, double> reports) {
  Trial t;
  t.id = t.number = number;
  t.state = state;
  t.intermediate = std::move(reports);
  if (state == TrialState::Complete) t.value = t.intermediate.rbegin()->second;
  t.end_time = state == TrialState::Running ? 0 : static_cast<double>(number + 1);
  return t;
}

std::string error_of(const std::string& yaml) {
  try {
    make_pruner(YAML::Load(yaml), "pruner", Direction::Minimize);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Pruners, MedianOfCompletedTrialsAtTheStep) {
  auto p =
      make_pruner(YAML::Load("{type: median, n_startup_trials: 2}"), "pruner", Direction::Minimize);
  std::vector<Trial> ts = {trial(0, TrialState::Complete, {{0, 1.0}, {1, 0.5}}),
                           trial(1, TrialState::Complete, {{0, 3.0}, {1, 2.5}}),
                           trial(2, TrialState::Running, {{0, 2.1}})};
  EXPECT_TRUE(p->should_prune(ts[2], 0, ts));  // 2.1 > median(1, 3) = 2
  ts[2].intermediate[0] = 1.9;
  EXPECT_FALSE(p->should_prune(ts[2], 0, ts));
  auto q =
      make_pruner(YAML::Load("{type: median, n_startup_trials: 2}"), "pruner", Direction::Maximize);
  EXPECT_TRUE(q->should_prune(ts[2], 0, ts));  // maximizing: 1.9 < 2
  auto late =
      make_pruner(YAML::Load("{type: median, n_startup_trials: 3}"), "pruner", Direction::Minimize);
  ts[2].intermediate[0] = 9;
  EXPECT_FALSE(late->should_prune(ts[2], 0, ts));  // only 2 completed trials
}

TEST(Pruners, NanPercentileIsNumpys) {
  EXPECT_DOUBLE_EQ(nan_percentile({3, 1, 2, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(nan_percentile({3, 1, NAN, 2, 4}, 25), 1.75);
  EXPECT_DOUBLE_EQ(nan_percentile({5}, 90), 5);
  EXPECT_TRUE(std::isnan(nan_percentile({NAN, NAN}, 50)));
}

TEST(Pruners, SuccessiveHalvingKeepsTheTopFraction) {
  auto p = make_pruner(YAML::Load("{type: asha, min_resource: 1, reduction_factor: 2}"), "pruner",
                       Direction::Minimize);
  std::vector<Trial> ts;
  for (int i = 0; i < 4; ++i)
    ts.push_back(trial(i, TrialState::Complete, {{0, 0.0}, {1, 1.0 + i}}));
  ts.push_back(trial(4, TrialState::Running, {{0, 0.0}, {1, 2.5}}));
  // Rung 0 (step 1) values 1, 2, 3, 4 and 2.5: 5 // 2 = 2 promotable -> must be <= 2.
  EXPECT_TRUE(p->should_prune(ts[4], 1, ts));
  ts[4].intermediate[1] = 1.5;
  EXPECT_FALSE(p->should_prune(ts[4], 1, ts));
  EXPECT_FALSE(p->should_prune(ts[4], 0, ts));  // step 0 is below the first rung
}

TEST(Pruners, HyperbandBracketsFollowCrc32) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);  // the CRC-32 check value
  HyperbandPruner h({1, 27, 3, 0}, Direction::Minimize, "study");
  std::map<int64_t, int> count;
  for (int64_t n = 0; n < 2000; ++n) count[h.bracket_of(n, 27)]++;
  ASSERT_EQ(count.size(), 4u);    // floor(log3(27)) + 1 brackets
  EXPECT_GT(count[0], count[3]);  // budgets 27, 12, 6, 4 (ceil(4 * 3^s / (s + 1)))
  EXPECT_EQ(HyperbandPruner({5, std::nullopt, 3, 0}, Direction::Minimize, "s").bracket_of(7, 2), 0);
}

// `lower` on a median pruner prunes a collapsed trial at its first report although the median
// rule is still in its start-up; reports within the bounds are left to the median rule.
TEST(Pruners, BoundsOnAMedianPrunerActDuringStartUp) {
  auto p = make_pruner(YAML::Load("{type: median, n_startup_trials: 3, lower: 0.2}"), "pruner",
                       Direction::Maximize);
  std::vector<Trial> ts = {trial(0, TrialState::Running, {{0, 0.05}})};
  EXPECT_TRUE(p->should_prune(ts[0], 0, ts));  // F1 0.05: collapsed, no completed trial yet
  ts[0].intermediate[0] = 0.45;
  EXPECT_FALSE(p->should_prune(ts[0], 0, ts));
  ts[0].intermediate[0] = NAN;
  EXPECT_TRUE(p->should_prune(ts[0], 0, ts));
  // Past start-up the median rule still prunes within the bounds.
  ts = {trial(0, TrialState::Complete, {{0, 0.6}}), trial(1, TrialState::Complete, {{0, 0.7}}),
        trial(2, TrialState::Complete, {{0, 0.8}}), trial(3, TrialState::Running, {{0, 0.4}})};
  EXPECT_TRUE(p->should_prune(ts[3], 0, ts));
  auto bounded_asha = make_pruner(YAML::Load("{type: asha, min_resource: 1, upper: 2.0}"), "pruner",
                                  Direction::Minimize);
  std::vector<Trial> one = {trial(0, TrialState::Running, {{0, 2.5}})};
  EXPECT_TRUE(bounded_asha->should_prune(one[0], 0, one));
}

// With k folds the bounds judge a trial from the end of its first fold on: an evaluation inside
// fold 0 (a model after one of its epochs, predicting one class) is left to the median rule, here
// still in start-up; the fold's value below the bound prunes. Without folds every report is judged.
TEST(Pruners, BoundsWithFoldsJudgeFromTheFirstFoldsEnd) {
  auto p = make_pruner(YAML::Load("{type: median, n_startup_trials: 3, lower: 0.2}"), "pruner",
                       Direction::Maximize, "s", 5);
  std::vector<Trial> ts = {trial(0, TrialState::Running, {{100, 0.0}})};
  EXPECT_FALSE(p->should_prune(ts[0], 100, ts));  // epoch 1 of fold 0: F1 0, not judged
  ts[0].intermediate[200] = 0.1;
  EXPECT_FALSE(p->should_prune(ts[0], 200, ts));
  ts[0].fold_values[0] = 0.1;  // fold 0 ended at 0.1 (its best evaluation): collapsed
  ts[0].intermediate[300] = 0.1;
  EXPECT_TRUE(p->should_prune(ts[0], 300, ts));
  // A fold that ended at 0.3, then fold 1's evaluations: running means (0.3 + 0.2) / 2 = 0.25,
  // above the bound, and (0.3 + 0.0) / 2 = 0.15, below it.
  ts[0].fold_values[0] = 0.3;
  ts[0].intermediate[300] = 0.3;
  ts[0].intermediate[400] = 0.25;
  EXPECT_FALSE(p->should_prune(ts[0], 400, ts));
  ts[0].intermediate[500] = 0.15;
  EXPECT_TRUE(p->should_prune(ts[0], 500, ts));
  auto unfolded = make_pruner(YAML::Load("{type: median, n_startup_trials: 3, lower: 0.2}"),
                              "pruner", Direction::Maximize, "s", 1);
  ts = {trial(0, TrialState::Running, {{100, 0.0}})};
  EXPECT_TRUE(unfolded->should_prune(ts[0], 100, ts));
}

// Optuna's ThresholdPruner by hand (every decision against Optuna: pruner_golden_test.cc).
TEST(Pruners, ThresholdAfterWarmupAtIntervals) {
  auto p = make_pruner(YAML::Load("{type: threshold, lower: 0.0, n_warmup_steps: 1, "
                                  "interval_steps: 2}"),
                       "pruner", Direction::Minimize);
  Trial t = trial(0, TrialState::Running, {{0, -1.0}});
  EXPECT_FALSE(p->should_prune(t, 0, {t}));  // warm-up
  t.intermediate[1] = -1.0;
  EXPECT_TRUE(p->should_prune(t, 1, {t}));  // step 1: a check point, below lower
  t.intermediate[2] = -1.0;
  EXPECT_FALSE(p->should_prune(t, 2, {t}));  // step 2: inside the interval begun at 1
}

TEST(Pruners, ConfigErrorsNameTheKey) {
  EXPECT_NE(error_of("{type: threshold}").find("lower, upper"), std::string::npos);
  EXPECT_NE(error_of("{type: threshold, lower: 1, upper: 0}").find("pruner.lower"),
            std::string::npos);
  EXPECT_NE(error_of("{type: median, lower: low}").find("pruner.lower"), std::string::npos);
  EXPECT_NE(error_of("{type: threshold, upper: 1, n_min_trials: 2}").find("pruner.n_min_trials"),
            std::string::npos);
  EXPECT_NE(error_of("{type: median, warmup: 3}").find("pruner.warmup"), std::string::npos);
  EXPECT_NE(error_of("{type: percentile}").find("pruner.percentile"), std::string::npos);
  EXPECT_NE(error_of("{type: percentile, percentile: 120}").find("pruner.percentile"),
            std::string::npos);
  EXPECT_NE(error_of("{type: median, interval_steps: 0}").find("pruner.interval_steps"),
            std::string::npos);
  EXPECT_NE(error_of("{type: asha, reduction_factor: 1}").find("pruner.reduction_factor"),
            std::string::npos);
  EXPECT_NE(error_of("{type: asha, min_resource: soon}").find("pruner.min_resource"),
            std::string::npos);
  EXPECT_NE(error_of("{type: hyperband, max_resource: 0}").find("pruner.max_resource"),
            std::string::npos);
  EXPECT_NE(error_of("{type: wilcoxon}").find("pruner.type"), std::string::npos);
  EXPECT_FALSE(make_pruner(YAML::Node(), "pruner", Direction::Minimize)
                   ->should_prune(trial(0, TrialState::Running, {{0, 1e9}}), 0, {}));
}

}  // namespace
}  // namespace ftune::hpo
