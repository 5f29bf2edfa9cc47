// Every pruning decision equals Optuna's: the study scenarios of tests/fixtures/hpo/pruners.json
// (written by tools/make_hpo_fixtures.py with Optuna) are replayed event by event, and each
// should_prune answer is compared with the one Optuna gave at that point.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "hpo/pruner.h"
#include "io/json_file.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

YAML::Node to_yaml(const nlohmann::json& cfg) {
  return YAML::Load(cfg.dump());
}

TEST(PrunerGolden, EveryDecisionMatchesOptuna) {
  const auto fixture = io::read_json_file(test::fixtures_dir() + "/hpo/pruners.json");
  const std::string study_name = fixture.at("study_name");
  int64_t decisions = 0, prunes = 0, mismatches = 0;
  std::map<std::string, int64_t> per_type;
  for (size_t ci = 0; ci < fixture.at("cases").size(); ++ci) {
    const auto& c = fixture["cases"][ci];
    const Direction direction =
        c.at("direction") == "minimize" ? Direction::Minimize : Direction::Maximize;
    const auto pruner = make_pruner(to_yaml(c.at("config")), "pruner", direction, study_name);
    std::vector<Trial> trials;
    double clock = 0;
    for (const auto& e : c.at("events")) {
      const int64_t number = e.at("number");
      clock += 1;
      if (e.at("op") == "ask") {
        ASSERT_EQ(number, static_cast<int64_t>(trials.size()));
        Trial t;
        t.id = t.number = number;
        t.state = TrialState::Running;
        t.start_time = clock;
        trials.push_back(t);
        continue;
      }
      Trial& t = trials.at(static_cast<size_t>(number));
      if (e.at("op") == "tell") {
        const std::string state = e.at("state");
        t.state = state == "COMPLETE" ? TrialState::Complete
                  : state == "PRUNED" ? TrialState::Pruned
                                      : TrialState::Failed;
        if (t.state == TrialState::Complete) t.value = e.at("value").get<double>();
        t.end_time = clock;
        continue;
      }
      const int64_t step = e.at("step");
      t.intermediate[step] = e.at("value").is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                     : e.at("value").get<double>();
      const bool expected = e.at("prune");
      const bool got = pruner->should_prune(t, step, trials);
      ++decisions;
      prunes += expected;
      per_type[c["config"]["type"]]++;
      if (got != expected) {
        ++mismatches;
        ADD_FAILURE() << fmt::format("case {} ({} {}) trial {} step {}: ftune {} Optuna {}", ci,
                                     c["config"].dump(), c["direction"].get<std::string>(), number,
                                     step, got, expected);
        if (mismatches > 20) return;
      }
    }
  }
  EXPECT_GT(decisions, 10000);
  EXPECT_GT(prunes, 1000);  // the cases exercise both answers
  for (const char* type : {"median", "percentile", "asha", "hyperband", "threshold"})
    EXPECT_GT(per_type[type], 500) << type << ": too few decisions checked";
  for (const auto& [type, n] : per_type)
    std::printf("%s: %lld decisions\n", type.c_str(), static_cast<long long>(n));
}

}  // namespace
}  // namespace ftune::hpo
