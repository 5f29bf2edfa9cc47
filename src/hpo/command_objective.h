// The objective that runs a shell command per trial: the user's own training script, in any
// language. The command gets the trial's params as `--name=value` arguments (unless disabled) and
// as JSON in the environment variable FTUNE_TRIAL_PARAMS ({"name": value, ...}, values as the
// config writes them; the `fixed` values too), with FTUNE_TRIAL_NUMBER and FTUNE_FOLDS. It
// answers on its standard output, one line each:
//
//   intermediate STEP VALUE   an intermediate value (the pruner may stop the trial)
//   fold K VALUE              fold K's final value (the running mean is reported at step K)
//   value V                   the final value (without it: the mean of the folds reported)
//
// Other lines are passed to the log. When a report says stop, the command's process group is
// killed and the trial ends PRUNED. A non-zero exit fails the trial. When the trial's time is up
// (trial_timeout_s), the group gets SIGTERM and, kill_grace_s later, SIGKILL. The command dies
// with its worker, even one killed with -9 (trial_process.h).
#pragma once

#include <map>
#include <string>

#include "hpo/objective.h"

namespace ftune::hpo {

class CommandObjective : public Objective {
 public:
  CommandObjective(std::string command, std::map<std::string, std::string> fixed, bool pass_args,
                   int folds, double kill_grace_s = 10);
  double run(const Trial& trial, const SearchSpace& space, TrialReporter& reporter) override;

  // The command line run for `trial` (exposed for tests and `--dry-run` style messages).
  std::string command_line(const Trial& trial, const SearchSpace& space) const;
  // The FTUNE_TRIAL_PARAMS JSON for `trial`.
  std::string params_json(const Trial& trial, const SearchSpace& space) const;

 private:
  std::string command_;
  std::map<std::string, std::string> fixed_;
  bool pass_args_;
  int folds_;
  double kill_grace_s_;
};

// 'text' with single quotes escaped for /bin/sh.
std::string shell_quote(const std::string& text);

}  // namespace ftune::hpo
