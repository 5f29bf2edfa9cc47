// What a trial runs. The worker hands an Objective the trial (number, sampled params) and a
// TrialReporter; the objective reports intermediate values by step, or per fold for k-fold
// cross-validation, and returns the final value. When a report answers true (the pruner says
// stop, or the trial was taken away from this worker), the objective stops early by throwing
// TrialPruned (or by returning; the trial then still ends PRUNED). When stop_requested() turns
// true (the trial ran past trial_timeout_s), the objective stops as soon as it can (a command's
// process group is terminated, a training run stops at its next step) and throws; the worker
// fails the trial with the reason. A retry (same params as the failed trial it retries) gets that
// trial from retried(), so an objective can continue its work instead of starting over.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "hpo/search_space.h"
#include "hpo/trial.h"

namespace ftune::hpo {

class TrialReporter {
 public:
  virtual ~TrialReporter() = default;
  // Stores `value` at `step`; true when the trial should stop now.
  virtual bool report(int64_t step, double value) = 0;
  // Stores fold `fold`'s final value and reports the mean of the folds so far at step `step`
  // (the fold's number, for an objective that reports only at fold ends); true when the trial
  // should stop now.
  virtual bool report_fold(int64_t fold, double value, int64_t step) = 0;
  bool report_fold(int64_t fold, double value) { return report_fold(fold, value, fold); }
  // True once the trial must stop (its time is up); may turn true at any moment (another thread
  // sets it), so objectives poll it.
  virtual bool stop_requested() const { return false; }
  // The failed trial this one retries, with its reports and attributes; null for a new trial.
  virtual const Trial* retried() const { return nullptr; }
  // Records an attribute of the trial in the study (shown by `ftune hpo status`).
  virtual void set_attr(const std::string& /*key*/, const nlohmann::json& /*value*/) {}
};

// Thrown by an objective that stops because a report said so.
class TrialPruned : public std::exception {
 public:
  const char* what() const noexcept override { return "trial pruned"; }
};

class Objective {
 public:
  virtual ~Objective() = default;
  // The trial's final value. Any other exception fails the trial with its message.
  virtual double run(const Trial& trial, const SearchSpace& space, TrialReporter& reporter) = 0;
  // Checks, before the first trial, that trials of this space can run at all (a configuration
  // that every trial would fail on); InputError naming the file and key at fault.
  virtual void validate(const SearchSpace& /*space*/) const {}
};

}  // namespace ftune::hpo
