// Optuna's ThresholdPruner, and the same bounds on any other pruner (ftune's addition).
//
// ThresholdPruner (optuna/pruners/_threshold.py): a trial is pruned when its latest report is NaN,
// below `lower` or above `upper`, after n_warmup_steps and at the first report of each interval of
// interval_steps (as the percentile pruner counts them).
// BoundedPruner: `lower` / `upper` given to a median, percentile, ASHA or Hyperband pruner prune a
// trial at a report outside them (no warm-up, no start-up trials), before that pruner's own rule:
// a fine-tuning trial that collapsed (an F1 near 0) stops instead of training every fold as one of
// the median pruner's start-up trials. In a study with k folds the bounds judge a trial from the
// end of its first fold on (its first fold's value, then the running means), not the evaluations
// inside that fold: after one epoch of three a model still learning can predict one class as a
// collapsed one does (found in bench/study_vs_optuna: F1 0 at epoch 1, a working model later).
#pragma once

#include <limits>
#include <memory>

#include "hpo/pruner.h"

namespace ftune::hpo {

struct ThresholdOptions {
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();
  int64_t n_warmup_steps = 0;
  int64_t interval_steps = 1;
};

class ThresholdPruner : public Pruner {
 public:
  explicit ThresholdPruner(ThresholdOptions o) : o_(o) {}
  bool should_prune(const Trial& trial, int64_t step,
                    const std::vector<Trial>& trials) const override;

 private:
  ThresholdOptions o_;
};

class BoundedPruner : public Pruner {
 public:
  // bounds: lower / upper (n_warmup_steps and interval_steps stay 0 and 1: every report).
  // after_first_fold: judge only trials with a finished fold (Trial::fold_values), as in a study
  // with k folds; otherwise every report.
  BoundedPruner(ThresholdOptions bounds, std::unique_ptr<Pruner> inner, bool after_first_fold)
      : bounds_(bounds), inner_(std::move(inner)), after_first_fold_(after_first_fold) {}
  bool should_prune(const Trial& trial, int64_t step,
                    const std::vector<Trial>& trials) const override {
    const bool judged = !after_first_fold_ || !trial.fold_values.empty();
    return (judged && bounds_.should_prune(trial, step, trials)) ||
           inner_->should_prune(trial, step, trials);
  }

 private:
  ThresholdPruner bounds_;
  std::unique_ptr<Pruner> inner_;
  bool after_first_fold_;
};

}  // namespace ftune::hpo
