// The study fixture (study_fixture.h), written with hpo::Storage as a worker would.
#include "study_fixture.h"

#include <yaml-cpp/yaml.h>

#include "hpo/search_space.h"
#include "hpo/storage.h"

namespace ftune::report::test_fixture {
namespace {

using hpo::Distribution;

hpo::SearchSpace space() {
  return hpo::SearchSpace::parse(YAML::Load(R"(
training.learning_rate: {type: float, low: 1.0e-5, high: 1.0e-2, log: true}
training.weight_decay: {type: float, low: 0.0, high: 0.3}
training.batch_size: {type: categorical, choices: ["16", "32", "64"]}
model.layers: {type: int, low: 1, high: 12}
)"),
                                 "fixture");
}

std::map<std::string, Distribution> distributions(const hpo::SearchSpace& s) {
  std::map<std::string, Distribution> d;
  for (const hpo::ParamSpec& p : s.params()) d[p.name] = p.dist;
  return d;
}

hpo::Params params_for(int i) {
  // A fixed, spread-out sequence (no RNG: the counts are what matter).
  const double u = std::fmod(0.618034 * (i + 1), 1.0), v = std::fmod(0.414214 * (i + 3), 1.0);
  return {{"training.learning_rate", std::pow(10.0, -5 + 3 * u)},
          {"training.weight_decay", 0.3 * v},
          {"training.batch_size", static_cast<double>(i % 3)},
          {"model.layers", static_cast<double>(1 + (i * 5) % 12)}};
}

double objective(const hpo::Params& p) {
  return 0.9 - 0.05 * std::pow(std::log10(p.at("training.learning_rate")) + 3.5, 2) -
         0.1 * p.at("training.weight_decay");
}

}  // namespace

StudyCounts write_study(const std::string& db, const std::string& name, int n) {
  const hpo::SearchSpace s = space();
  auto storage = hpo::open_storage(db);
  const hpo::StudyInfo study =
      storage->create_or_load_study(name, hpo::Direction::Maximize, s.to_json());
  StudyCounts c;
  for (int i = 0; i < n; ++i) {
    auto t = storage->start_trial(study.id);
    const hpo::Params p = params_for(i);
    storage->set_params(t->id, p, distributions(s));
    const double value = objective(p);
    ++c.trials;
    if (i % 5 == 3) {  // pruned after 1 or 2 reports
      const int reports = 1 + (i % 2);
      for (int step = 1; step <= reports; ++step)
        storage->report_intermediate(t->id, step, value * step / 4.0);
      c.intermediate += reports;
      ++c.reporting;
      storage->finish(t->id, hpo::TrialState::Pruned, value * reports / 4.0, "");
      ++c.pruned;
    } else if (i == 6) {  // failed, then retried
      storage->finish(t->id, hpo::TrialState::Failed, std::nullopt, "CUDA out of memory");
      ++c.failed;
      if (storage->enqueue_retry(t->id, 2)) {
        // The retry is the oldest WAITING trial: the next one started, with trial 6's params.
        ++c.retries;
        auto r = storage->start_trial(study.id);
        storage->finish(r->id, hpo::TrialState::Complete, 0.5, "");
        ++c.complete;
        ++c.trials;
      }
      continue;
    } else {
      for (int step = 1; step <= 3; ++step)
        storage->report_intermediate(t->id, step, value * (0.7 + 0.1 * step));
      for (int fold = 0; fold < 3; ++fold) storage->report_fold(t->id, fold, value + 0.01 * fold);
      c.intermediate += 3;
      ++c.reporting;
      c.folds += 3;
      storage->finish(t->id, hpo::TrialState::Complete, value + 0.01, "");
      ++c.complete;
    }
  }
  // One trial left running, with one report.
  auto running = storage->start_trial(study.id);
  storage->set_params(running->id, params_for(n), distributions(s));
  storage->report_intermediate(running->id, 1, 0.3);
  ++c.intermediate;
  ++c.reporting;
  ++c.running;
  ++c.trials;
  return c;
}

void add_complete_trial(const std::string& db, const std::string& name, double value) {
  const hpo::SearchSpace s = space();
  auto storage = hpo::open_storage(db);
  const hpo::StudyInfo study =
      storage->create_or_load_study(name, hpo::Direction::Maximize, s.to_json());
  auto t = storage->start_trial(study.id);
  storage->set_params(t->id, params_for(static_cast<int>(t->number)), distributions(s));
  storage->finish(t->id, hpo::TrialState::Complete, value, "");
}

}  // namespace ftune::report::test_fixture
