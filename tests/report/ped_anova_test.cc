// PED-ANOVA importances against Optuna 5.0's PedAnovaImportanceEvaluator on the studies of
// tests/fixtures/report/ped_anova.json (tools/make_report_fixtures.py): the same values and the
// same ranking.
#include "report/ped_anova.h"

#include <gtest/gtest.h>

#include <fstream>

#include "hpo/storage.h"
#include "hpo/trial_json.h"
#include "test_util.h"

namespace ftune::report {
namespace {

std::vector<hpo::Trial> trials_of(const nlohmann::json& c) {
  std::vector<hpo::Trial> out;
  for (const auto& t : c["trials"]) {
    hpo::Trial trial;
    trial.number = trial.id = t["number"].get<int64_t>();
    trial.state = hpo::parse_trial_state(t["state"].get<std::string>());
    if (t["value"].is_number()) trial.value = t["value"].get<double>();
    hpo::params_from_json(t, "fixture", trial.params, trial.distributions);
    out.push_back(trial);
  }
  return out;
}

TEST(PedAnova, MatchesOptuna) {
  const auto golden = nlohmann::json::parse(
      std::ifstream(test::fixtures_dir() + "/report/ped_anova.json"));
  ASSERT_EQ(golden["cases"].size(), 2u);
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto direction = c["direction"] == "minimize" ? hpo::Direction::Minimize
                                                        : hpo::Direction::Maximize;
    const auto got = ped_anova_importances(trials_of(c), direction);
    const auto& want = c["importances"];
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i][0].get<std::string>()) << "rank " << i;
      EXPECT_NEAR(got[i].second, want[i][1].get<double>(), 1e-9) << got[i].first;
    }
  }
}

TEST(PedAnova, TooFewTrialsGiveEqualShares) {
  hpo::Trial t;
  t.state = hpo::TrialState::Complete;
  t.value = 1.0;
  t.params = {{"a", 0.5}, {"b", 0.1}};
  t.distributions = {{"a", {}}, {"b", {}}};
  const auto got = ped_anova_importances({t}, hpo::Direction::Minimize);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_DOUBLE_EQ(got[0].second, 0.5);
  EXPECT_DOUBLE_EQ(got[1].second, 0.5);
}

}  // namespace
}  // namespace ftune::report
