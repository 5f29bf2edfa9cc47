// One worker of a study, from its search config to its outcome: what `ftune hpo run` and the
// Python package's ftune.hpo.run share. Parses the space, sampler and pruner, checks the objective
// before the storage is touched (a config no trial can run writes nothing), creates or loads the
// study, runs trials until the budget, the timeout or Ctrl-C (hpo/worker.h), and returns this
// worker's counts with the study's and its best trial. The objective is the config's own (a
// command, or in-process training trials) or one the caller gives (a Python function).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "hpo/objective.h"
#include "hpo/search_config.h"
#include "hpo/storage.h"
#include "hpo/worker.h"

namespace ftune::hpo {

// The objective a config names: a command, or in-process `ftune train` trials.
std::unique_ptr<Objective> config_objective(const SearchConfig& c);

struct StudyOutcome {
  StudyInfo study;
  WorkerStats worker;               // this worker's trials
  std::array<int64_t, 5> counts{};  // the study's trials by state (index: TrialState)
  std::vector<Trial> trials;        // the study's trials when the worker ended
  std::optional<Trial> best;        // the study's best complete trial
  bool interrupted = false;         // Ctrl-C / SIGTERM ended the worker
};

// Runs one worker with `objective`. InputError naming the config for a bad space, sampler,
// pruner or objective, or a missing storage.
StudyOutcome run_study_worker(const SearchConfig& c, Objective& objective);

}  // namespace ftune::hpo
