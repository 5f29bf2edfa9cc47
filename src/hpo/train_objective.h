// The in-process `ftune train` objective of a hyperparameter search: each trial is a training run
// of the base config with the trial's parameters (and the search's fixed values) as dotted
// overrides, in its own run directory (<output.dir>/trial-N, fold-k below it for k-fold). Every
// validation evaluation is reported as an intermediate value so the pruner can stop the run
// early; with k folds (FoldReports, search_config.h) either every evaluation of every fold is
// reported at its budget (epochs trained in the trial so far x 100) with the mean of the finished
// folds and the evaluation's value, or only each fold's end (the running mean after fold k, at
// step k). The trial's value is the best validation metric (mean over folds).
//
// A retry of a trial whose worker died (or whose run failed) continues it: the failed trial's run
// directory becomes the retry's, the folds it finished keep their values, and the fold it was in
// resumes from its last checkpoint (the trainer's --resume: bit-exact on the CPU), so the result
// equals an uninterrupted trial's. The trial's attribute "resumed" records it: {"from_trial",
// "folds_reused", "fold", "step"}. A trial past its time (TrialReporter::stop_requested) stops
// at the next optimizer step, after saving a checkpoint.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hpo/objective.h"
#include "hpo/rank_trial.h"
#include "hpo/search_config.h"

namespace ftune::hpo {

class TrainObjective : public Objective {
 public:
  // `metric`: a key of the validation metrics ("macro_f1", "accuracy", "loss", "roc_auc", ...;
  // an "eval." or "validation." prefix is accepted). Empty: macro_f1.
  // `launch`: with ranks > 1, each fold's run is a data-parallel run of that many ranks started
  // by the launcher (hpo/rank_trial.h) instead of a run in this process.
  // `keep_models` false: each fold's run keeps no weights (output.save_model false): no
  // checkpoint at its evaluations or end, no model/ (a stop by signal still checkpoints).
  TrainObjective(std::string train_config, std::map<std::string, std::string> fixed,
                 std::string metric, int64_t folds, RankLaunch launch = {},
                 FoldReports fold_reports = FoldReports::Evaluations, bool keep_models = true);

  double run(const Trial& trial, const SearchSpace& space, TrialReporter& reporter) override;
  // Loads the training config with the fixed values, the folds and each parameter at each of its
  // representative values (a range's bounds, every choice), and checks that the files it names
  // exist: a config that no trial could run on is refused before the first trial.
  void validate(const SearchSpace& space) const override;

 private:
  // What a retry takes over from the failed trial it retries.
  struct Continued {
    int64_t from = -1;                       // the failed trial's number (-1: not a retry)
    bool moved = false;                      // its run directory is now this trial's
    std::map<int64_t, double> folds;         // its finished folds' values
    std::map<int64_t, double> intermediate;  // its evaluations (one fold, or reported by budget)
  };
  Continued continue_retried(const Trial& trial, TrialReporter& reporter,
                             const std::filesystem::path& trial_dir) const;
  // The fixed values and the trial's params as dotted overrides.
  std::vector<std::string> overrides(const Params& params, const SearchSpace& space) const;
  // What one fold's run adds: its fold of the split, its run directory, the study metric.
  std::vector<std::string> fold_overrides(int64_t fold, const std::string& dir) const;

  std::string train_config_;
  std::map<std::string, std::string> fixed_;
  std::string metric_;
  int64_t folds_;
  RankLaunch launch_;
  FoldReports fold_reports_;
  bool keep_models_;
};

}  // namespace ftune::hpo
