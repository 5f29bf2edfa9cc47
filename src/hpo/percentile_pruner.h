// Optuna's PercentilePruner (and MedianPruner = percentile 50): prune a trial whose best
// intermediate value so far is worse than the given percentile of the completed trials' values at
// the same step.
#pragma once

#include "hpo/pruner.h"

namespace ftune::hpo {

struct PercentileOptions {
  double percentile = 50;
  int64_t n_startup_trials = 5;
  int64_t n_warmup_steps = 0;
  int64_t interval_steps = 1;
  int64_t n_min_trials = 1;
};

class PercentilePruner : public Pruner {
 public:
  PercentilePruner(PercentileOptions o, Direction direction) : o_(o), direction_(direction) {}
  bool should_prune(const Trial& trial, int64_t step,
                    const std::vector<Trial>& trials) const override;

 private:
  PercentileOptions o_;
  Direction direction_;
};

// Optuna's _is_first_in_interval_step: `step` is a pruning check point (the first report at or
// after a multiple of `interval` steps past `warmup`, no earlier report since it).
bool first_in_interval(int64_t step, const std::map<int64_t, double>& reported, int64_t warmup,
                       int64_t interval);

// numpy.nanpercentile(values, q) with the default linear method, bit for bit (NaNs dropped; NaN
// when nothing is left).
double nan_percentile(std::vector<double> values, double q);

}  // namespace ftune::hpo
