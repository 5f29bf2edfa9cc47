// The in-process `ftune train` objective of a hyperparameter search: each trial is a training run
// of the base config with the trial's parameters (and the search's fixed values) as dotted
// overrides, in its own run directory (<output.dir>/trial-N, fold-k below it for k-fold). Every
// validation evaluation is reported as an intermediate value so the pruner can stop the run
// early; with k folds, each fold's best value is reported and the running mean after fold k can
// prune the remaining folds. The trial's value is the best validation metric (mean over folds).
#pragma once

#include <map>
#include <string>

#include "hpo/objective.h"

namespace ftune::hpo {

class TrainObjective : public Objective {
 public:
  // `metric`: a key of the validation metrics ("macro_f1", "accuracy", "loss", "roc_auc", ...;
  // an "eval." or "validation." prefix is accepted). Empty: macro_f1.
  TrainObjective(std::string train_config, std::map<std::string, std::string> fixed,
                 std::string metric, int64_t folds);

  double run(const Trial& trial, const SearchSpace& space, TrialReporter& reporter) override;

 private:
  std::string train_config_;
  std::map<std::string, std::string> fixed_;
  std::string metric_;
  int64_t folds_;
};

}  // namespace ftune::hpo
