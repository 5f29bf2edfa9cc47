// What a trial runs. The worker hands an Objective the trial (number, sampled params) and a
// TrialReporter; the objective reports intermediate values by step, or per fold for k-fold
// cross-validation, and returns the final value. When a report answers true (the pruner says
// stop, or the trial was taken away from this worker), the objective stops early by throwing
// TrialPruned (or by returning; the trial then still ends PRUNED).
#pragma once

#include <cstdint>
#include <exception>

#include "hpo/search_space.h"
#include "hpo/trial.h"

namespace ftune::hpo {

class TrialReporter {
 public:
  virtual ~TrialReporter() = default;
  // Stores `value` at `step`; true when the trial should stop now.
  virtual bool report(int64_t step, double value) = 0;
  // Stores fold `fold`'s final value and reports the mean of the folds so far at step `fold`;
  // true when the trial should stop now.
  virtual bool report_fold(int64_t fold, double value) = 0;
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
};

}  // namespace ftune::hpo
