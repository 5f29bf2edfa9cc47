// A study's cost from its trials' times (hpo/study_cost.h): compute time summed by how trials
// ended, running trials counted to `now`, the wall span, and the best value against compute and
// wall time with trials that overlapped (two workers) counted up to each moment.
#include "hpo/study_cost.h"

#include <gtest/gtest.h>

#include "hpo/study_report.h"

namespace ftune::hpo {
namespace {

Trial timed(int64_t number, TrialState state, double start, double end,
            std::optional<double> value = {}) {
  Trial t;
  t.number = number;
  t.state = state;
  t.start_time = start;
  t.end_time = end;
  t.value = value;
  return t;
}

constexpr double T0 = 1.8e9;  // a time in 2027, seconds since the epoch

TEST(StudyCost, SumsTrialTimeByStateAndCountsRunningTrialsToNow) {
  const std::vector<Trial> trials = {
      timed(0, TrialState::Complete, T0, T0 + 100, 0.5),
      timed(1, TrialState::Pruned, T0 + 100, T0 + 130),
      timed(2, TrialState::Failed, T0 + 130, T0 + 135),
      timed(3, TrialState::Running, T0 + 135, 0),
      timed(4, TrialState::Waiting, 0, 0),
  };
  const StudyCost c = study_cost(trials, Direction::Maximize, T0 + 200);
  EXPECT_DOUBLE_EQ(c.complete_s, 100);
  EXPECT_DOUBLE_EQ(c.pruned_s, 30);
  EXPECT_DOUBLE_EQ(c.failed_s, 5);
  EXPECT_DOUBLE_EQ(c.running_s, 65);
  EXPECT_DOUBLE_EQ(c.compute_s(), 200);
  EXPECT_EQ(c.complete + c.pruned + c.failed + c.running, 4);  // the waiting one costs nothing
  EXPECT_DOUBLE_EQ(c.wall_s, 200);
}

TEST(StudyCost, TheBestCurveFollowsEndTimesAndCountsOverlappingTrialsUpToEachMoment) {
  // Two workers: A runs trials 0 and 2, B runs 1 and 3. Trial 1 ends first.
  const std::vector<Trial> trials = {
      timed(0, TrialState::Complete, T0, T0 + 100, 0.70),
      timed(1, TrialState::Complete, T0 + 10, T0 + 60, 0.60),
      timed(2, TrialState::Complete, T0 + 100, T0 + 150, 0.65),  // no better: no point
      timed(3, TrialState::Complete, T0 + 60, T0 + 200, 0.90),
  };
  const StudyCost c = study_cost(trials, Direction::Maximize, T0 + 1000);
  ASSERT_EQ(c.best_curve.size(), 3u);
  EXPECT_EQ(c.best_curve[0].trial, 1);
  EXPECT_DOUBLE_EQ(c.best_curve[0].best, 0.60);
  EXPECT_DOUBLE_EQ(c.best_curve[0].wall_s, 60);
  EXPECT_DOUBLE_EQ(c.best_curve[0].compute_s, 60 + 50);  // trial 0 so far + trial 1
  EXPECT_EQ(c.best_curve[1].trial, 0);
  EXPECT_DOUBLE_EQ(c.best_curve[1].compute_s, 100 + 50 + 40);  // + trial 3 from 60 to 100
  EXPECT_EQ(c.best_curve[2].trial, 3);
  EXPECT_DOUBLE_EQ(c.best_curve[2].compute_s, 100 + 50 + 50 + 140);
  EXPECT_DOUBLE_EQ(c.best_curve[2].wall_s, 200);
  EXPECT_DOUBLE_EQ(c.compute_s(), 340);
  EXPECT_DOUBLE_EQ(c.wall_s, 200);  // two workers: wall time runs behind compute

  const auto reached = first_reaching(c, 0.7, Direction::Maximize);
  ASSERT_TRUE(reached.has_value());
  EXPECT_EQ(reached->trial, 0);
  EXPECT_DOUBLE_EQ(reached->compute_s, 190);
  EXPECT_FALSE(first_reaching(c, 0.95, Direction::Maximize).has_value());
}

TEST(StudyCost, MinimizingKeepsTheLowestAndIgnoresUnusableTimes) {
  const std::vector<Trial> trials = {
      timed(0, TrialState::Complete, T0, T0 + 10, 3.0),
      timed(1, TrialState::Complete, T0 + 10, T0 + 20, 1.0),
      timed(2, TrialState::Complete, T0 + 20, T0 + 30, 2.0),
      timed(3, TrialState::Complete, T0 + 40, T0 + 35, 0.1),  // ends before it starts: left out
      timed(4, TrialState::Complete, 0, T0 + 50, 0.2),        // no start: left out
  };
  const StudyCost c = study_cost(trials, Direction::Minimize, T0 + 100);
  ASSERT_EQ(c.best_curve.size(), 2u);
  EXPECT_DOUBLE_EQ(c.best_curve.back().best, 1.0);
  EXPECT_DOUBLE_EQ(c.compute_s(), 30);
  EXPECT_EQ(c.complete, 3);
  const auto reached = first_reaching(c, 2.5, Direction::Minimize);
  ASSERT_TRUE(reached.has_value());
  EXPECT_EQ(reached->trial, 1);
}

// Training rows (the attribute the train_config objective records after each fold's run) add up
// to the study's compute in a machine-independent unit; a curve point counts the trials ended by
// then and the running ones as far as they are.
TEST(StudyCost, TrainedRowsAddUpAndFollowTheCurve) {
  std::vector<Trial> trials = {
      timed(0, TrialState::Complete, T0, T0 + 100, 0.7),
      timed(1, TrialState::Pruned, T0 + 100, T0 + 120),
      timed(2, TrialState::Complete, T0 + 120, T0 + 220, 0.9),
      timed(3, TrialState::Running, T0 + 220, 0),
  };
  trials[0].attrs["train_samples"] = 4800;
  trials[1].attrs["train_samples"] = 960;
  trials[2].attrs["train_samples"] = 4800;
  trials[3].attrs["train_samples"] = 1200;
  const StudyCost c = study_cost(trials, Direction::Maximize, T0 + 300);
  EXPECT_EQ(c.train_samples, 4800 + 960 + 4800 + 1200);
  ASSERT_EQ(c.best_curve.size(), 2u);
  EXPECT_EQ(c.best_curve[0].train_samples, 4800);
  EXPECT_EQ(c.best_curve[1].train_samples, 4800 + 960 + 4800);  // trial 3 started after
  EXPECT_NE(cost_lines(c).find("trained 11,760 rows; the best after 10,560\n"), std::string::npos)
      << cost_lines(c);
  // Without the attribute (a command objective) there is no such line.
  for (Trial& t : trials) t.attrs = nlohmann::json::object();
  EXPECT_EQ(cost_lines(study_cost(trials, Direction::Maximize, T0 + 300)).find("trained"),
            std::string::npos);
}

TEST(StudyCost, StatusShowsTheCostAndExportHoldsTheCurve) {
  const std::vector<Trial> trials = {
      timed(0, TrialState::Complete, T0, T0 + 5400, 0.8),
      timed(1, TrialState::Pruned, T0 + 5400, T0 + 5520),
  };
  StudyInfo info;
  info.name = "s";
  info.direction = Direction::Maximize;
  SearchSpace space;
  const std::string text = status_table(info, space, trials, T0 + 6000);
  EXPECT_NE(text.find("compute: 1.5 h in 2 trials (complete 1.5 h, pruned 2.0 min, failed 0 s, "
                      "running 0 s); wall 1.5 h"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("best 0.8 (trial 0) reached after 1.5 h of compute, 1.5 h of wall time"),
            std::string::npos)
      << text;
  const nlohmann::json j = trials_json(info, space, trials, T0 + 6000);
  EXPECT_DOUBLE_EQ(j["cost"]["compute_s"].get<double>(), 5520);
  EXPECT_DOUBLE_EQ(j["cost"]["pruned_s"].get<double>(), 120);
  ASSERT_EQ(j["cost"]["best_curve"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["cost"]["best_curve"][0]["compute_s"].get<double>(), 5400);
  EXPECT_FALSE(trials_json(info, space, trials).contains("cost"));
}

}  // namespace
}  // namespace ftune::hpo
