// The search configuration (`ftune hpo run --config search.yaml`): which study, where it is
// stored, how to sample and prune, the space, and what a trial runs. Every key is typed and
// validated; an unknown key is an InputError naming the file, its line and the key.
//
//   study: {name: NAME, direction: minimize|maximize, metric: eval.accuracy}
//   storage: sqlite:///study.db | postgresql://user@host:port/db   (a relative SQLite path is
//            relative to the working directory, as in SQLAlchemy / Optuna URLs)
//   sampler: {type: tpe, ...}        # see sampler.h (optional)
//   pruner: {type: median, ...}      # see pruner.h (optional)
//   space: {name: {type: float, low: .., high: .., log: true}, ...}   # see search_space.h
//   fixed: {name: value, ...}        # passed to every trial as is (optional)
//   objective: {command: "python train.py", args: true} | {train_config: train.yaml}
//   folds: 1  retries: 1  retry_failed: false  heartbeat_s: 10  grace_s: 60  seed: 0
//   trials: N  timeout_s: S          # defaults for --trials / --timeout (optional)
//   trial_timeout_s: 0               # > 0: a trial running longer is stopped and fails
//   kill_grace_s: 10                 # a stopped command gets SIGTERM, then SIGKILL this later
//   max_consecutive_failures: 5      # a worker stops after this many failures in a row with
//                                    #   the same error (0: never)
//   failure_backoff_s: 1             # wait after a failed trial, doubling per failure in a row
//   trial_ranks: 1                   # > 1: each train_config trial is a data-parallel run of
//                                    #   this many ranks (hpo/rank_trial.h)
//   trial_launcher: "mpirun -np {ranks}"   # what starts a trial's ranks ({ranks}: the count)
//   trials_per_device: 1             # > 1: `ftune hpo run` starts this many workers side by
//                                    #   side on its device (worker_group.h)
//   fold_reports: evaluations        # k folds: what the pruner sees (FoldReports below)
//   keep_trial_models: false         # train_config trials keep no weights (no checkpoints at
//                                    #   evaluations, no model/): their metrics are the result
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "hpo/trial.h"

namespace ftune::hpo {

// What a train_config trial with k folds reports to the pruner.
enum class FoldReports {
  // Every validation evaluation of every fold, at step = epochs the trial has trained so far
  // (over all its folds) x 100, with the mean of its finished folds' values and this evaluation's
  // value; at a fold's end its value replaces its last evaluation's. A poor trial can be pruned
  // after its first evaluation of fold 0 rather than after a whole fold.
  Evaluations,
  // Only the running mean over the finished folds, at step = the fold's number (an Optuna user's
  // trial.report after each fold).
  Folds,
};

struct SearchConfig {
  std::string path;  // the file it was read from (for messages)
  std::string study_name;
  Direction direction = Direction::Minimize;
  std::string metric;   // what the objective's value measures (the train objective reads it)
  std::string storage;  // URL
  YAML::Node sampler, pruner, space;  // handed to make_sampler / make_pruner / SearchSpace::parse
  std::map<std::string, std::string> fixed;
  std::string command;       // objective.command
  bool pass_args = true;     // objective.args: --name=value arguments for the command
  std::string train_config;  // objective.train_config (resolved against the file's directory)
  int64_t folds = 1;
  FoldReports fold_reports = FoldReports::Evaluations;
  int64_t retries = 1;
  bool retry_failed = false;
  double heartbeat_s = 10;
  double grace_s = 60;
  uint64_t seed = 0;
  int64_t trials = -1;   // < 0: no budget
  double timeout_s = 0;  // <= 0: none
  double trial_timeout_s = 0;  // <= 0: none
  double kill_grace_s = 10;
  int64_t max_consecutive_failures = 5;
  double failure_backoff_s = 1;
  int64_t trial_ranks = 1;
  std::string trial_launcher = "mpirun -np {ranks}";
  int64_t trials_per_device = 1;
  bool keep_trial_models = false;
};

// `caller_objective`: the caller runs trials with an objective of its own (ftune.hpo.run's Python
// function), so the config has no 'objective' (nor 'folds' or 'trial_ranks', which belong to it).
SearchConfig parse_search_config(const YAML::Node& root, const std::string& path,
                                 bool caller_objective = false);
// Reads and parses the file; InputError naming it when it is missing or not valid YAML.
SearchConfig load_search_config(const std::string& path, bool caller_objective = false);

}  // namespace ftune::hpo
