// Pruners decide whether a running trial should stop after an intermediate report. Every
// decision equals Optuna's (golden cases under tests/fixtures/hpo/): none, median, percentile,
// successive halving (ASHA), Hyperband and threshold. Reports are keyed by step; for k-fold CV the
// worker reports the running mean at step = fold index, so the same pruners apply.
//
// Optuna's successive-halving pruner records, on each trial, the value it had when it reached a
// rung. ftune derives the same record from the trial's intermediate values, which is exact when
// should_prune is called after every report, steps are reported in increasing order without
// crossing two rung boundaries in one report, and a trial stops as soon as it is told to (the
// worker's contract). With an "auto" resource Optuna starts recording only once a trial has
// completed; ftune treats trials that finished by then as unrecorded and the others as recorded
// from their start, which is exact unless a trial was running when the first one completed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "hpo/trial.h"

namespace ftune::hpo {

class Pruner {
 public:
  virtual ~Pruner() = default;
  // Should `trial` (running; it just reported at `step`) stop? `trials`: all trials of the study.
  virtual bool should_prune(const Trial& trial, int64_t step,
                            const std::vector<Trial>& trials) const = 0;
};

// cfg: the `pruner:` mapping {type: none|median|percentile|asha|hyperband|threshold, ...}
// (undefined -> none). Options, with Optuna's defaults:
//   median:     n_startup_trials (5), n_warmup_steps (0), interval_steps (1), n_min_trials (1)
//   percentile: percentile (required, 0..100) and the options of median
//   asha:       min_resource (auto|int, auto), reduction_factor (4), min_early_stopping_rate (0),
//               bootstrap_count (0)
//   hyperband:  min_resource (1), max_resource (auto|int, auto), reduction_factor (3),
//               bootstrap_count (0)
//   threshold:  lower, upper (at least one), n_warmup_steps (0), interval_steps (1)
// and on median, percentile, asha and hyperband (ftune's addition, hpo/threshold_pruner.h):
// lower / upper, a report outside them prunes at once, start-up trials included; with
// `folds` > 1 from the end of a trial's first fold on (its evaluations inside fold 0 are not
// judged by the bounds).
// Hyperband assigns trials to brackets by crc32("<study_name>_<number>") like Optuna; the
// three-argument form uses the study name "" (use the four-argument one in a real study).
std::unique_ptr<Pruner> make_pruner(const YAML::Node& cfg, const std::string& where,
                                    Direction direction);
std::unique_ptr<Pruner> make_pruner(const YAML::Node& cfg, const std::string& where,
                                    Direction direction, const std::string& study_name,
                                    int64_t folds = 1);

}  // namespace ftune::hpo
