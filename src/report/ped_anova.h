// Hyperparameter importances by PED-ANOVA, as Optuna 5 computes them
// (optuna.importance.PedAnovaImportanceEvaluator with its defaults, and get_param_importances'
// normalisation to a sum of 1): over the COMPLETE trials with a finite value, the Pearson
// divergence between a parameter's Parzen density (Scott's bandwidth, on a grid of at most 50
// cells) among the top 10 % of trials and among all of them, summed over the regimes (the
// parameter's distribution) weighted as condPED-ANOVA does.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hpo/trial.h"

namespace ftune::report {

struct PedAnovaOptions {
  double target_quantile = 0.1;  // gamma'
  double region_quantile = 1.0;  // gamma
  bool evaluate_on_local = true;
  int n_steps = 50;
  double prior_weight = 1.0;
  int min_trials_in_regime = 2;
};

// (parameter, importance) by decreasing importance, normalised to sum to 1 (equal shares when
// every raw importance is 0). Empty when no complete trial has parameters.
std::vector<std::pair<std::string, double>> ped_anova_importances(
    const std::vector<hpo::Trial>& trials, hpo::Direction direction,
    const PedAnovaOptions& options = {});

}  // namespace ftune::report
