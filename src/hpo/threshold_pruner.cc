// Threshold pruning, a line-by-line port of optuna/pruners/_threshold.py (see threshold_pruner.h).
#include "hpo/threshold_pruner.h"

#include <cmath>

#include "hpo/percentile_pruner.h"

namespace ftune::hpo {

bool ThresholdPruner::should_prune(const Trial& trial, int64_t, const std::vector<Trial>&) const {
  if (trial.intermediate.empty()) return false;
  const auto& [step, latest] = *trial.intermediate.rbegin();  // Optuna's last_step: the largest
  if (step < o_.n_warmup_steps) return false;
  if (!first_in_interval(step, trial.intermediate, o_.n_warmup_steps, o_.interval_steps))
    return false;
  return std::isnan(latest) || latest < o_.lower || latest > o_.upper;
}

}  // namespace ftune::hpo
