// A trial's training run that is itself data-parallel (issue 20): `ftune train` started as
// `ranks` ranks by the search's launcher (`mpirun -np {ranks}` by default; srun and mpirun
// options are the user's), as a child of the worker (hpo/trial_process.h: the launcher dies with
// the worker, and takes its ranks along).
// The worker follows the run through the metrics.jsonl that its rank 0 writes: each validation
// evaluation goes to `on_eval` as it appears (the pruner). A stop (pruned, or the trial's time up)
// creates the file the ranks' FTUNE_STOP_FILE names (<run_dir>.stop, on the run's shared file
// system): the ranks agree on it at their next step and save a checkpoint, so a retried trial
// resumes (launchers differ in what they do with SIGTERM: OpenMPI's mpirun kills its ranks); the
// launcher is terminated when the ranks have not ended kill_grace_s later. The run's summary.json
// is the result.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune::hpo {

struct RankLaunch {
  int64_t ranks = 1;                            // 1: trials run in the worker's process
  std::string launcher = "mpirun -np {ranks}";  // {ranks} is replaced by the count
  double kill_grace_s = 10;
};

// The launcher command with {ranks} filled in; InputError when it has no {ranks}.
std::string launcher_command(const RankLaunch& launch);

struct RankRunResult {
  nlohmann::json summary;  // null when the run was stopped
  bool stopped = false;    // on_eval said stop (pruned) or stop_requested() turned true
};

// Runs `ftune train --config train_config overrides... [--resume]` as launch.ranks ranks writing
// `run_dir` (an override among `overrides` sets output.dir to it). `on_eval(step, metrics)`
// returning true stops the run; so does stop_requested(). Error naming the trial, the exit status
// and the run's last lines when it fails.
RankRunResult run_trial_ranks(const RankLaunch& launch, const std::string& train_config,
                              const std::vector<std::string>& overrides, bool resume,
                              const std::string& run_dir, int64_t trial,
                              const std::function<bool(int64_t, const nlohmann::json&)>& on_eval,
                              const std::function<bool()>& stop_requested);

}  // namespace ftune::hpo
