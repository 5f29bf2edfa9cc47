// Percentile / median pruning, a line-by-line port of optuna/pruners/_percentile.py.
#include "hpo/percentile_pruner.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ftune::hpo {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// np.nanmin / np.nanmax over the trial's reports (NaN when all are NaN).
double best_over_steps(const Trial& t, Direction d) {
  double best = kNaN;
  for (const auto& [s, v] : t.intermediate) {
    if (std::isnan(v)) continue;
    if (std::isnan(best) || (d == Direction::Maximize ? v > best : v < best)) best = v;
  }
  return best;
}

}  // namespace

bool first_in_interval(int64_t step, const std::map<int64_t, double>& reported, int64_t warmup,
                       int64_t interval) {
  const int64_t nearest_lower = (step - warmup) / interval * interval + warmup;
  int64_t second_last = -1;
  for (const auto& [s, v] : reported)
    if (s > second_last && s != step) second_last = s;
  return second_last < nearest_lower;
}

double nan_percentile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  const double virtual_index = (n - 1) * (q / 100.0);
  double prev = std::floor(virtual_index), next = prev + 1;
  size_t ia, ib;
  if (virtual_index >= n - 1) {  // numpy takes the last value and indexes with -1
    ia = ib = values.size() - 1;
    prev = -1;
  } else if (virtual_index < 0) {
    ia = ib = 0;
  } else {
    ia = static_cast<size_t>(prev);
    ib = static_cast<size_t>(next);
  }
  const double gamma = virtual_index - prev;
  const double a = values[ia], b = values[ib];
  const double diff = b - a;  // numpy's _lerp, including its switch at gamma >= 0.5
  return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

bool PercentilePruner::should_prune(const Trial& trial, int64_t step,
                                    const std::vector<Trial>& trials) const {
  int64_t n_complete = 0;
  for (const auto& t : trials) n_complete += t.state == TrialState::Complete;
  if (n_complete == 0 || n_complete < o_.n_startup_trials) return false;
  if (trial.intermediate.empty()) return false;
  if (step < o_.n_warmup_steps) return false;
  if (!first_in_interval(step, trial.intermediate, o_.n_warmup_steps, o_.interval_steps))
    return false;
  const double best = best_over_steps(trial, direction_);
  if (std::isnan(best)) return true;

  std::vector<double> at_step;
  for (const auto& t : trials) {
    if (t.state != TrialState::Complete) continue;
    auto it = t.intermediate.find(step);
    if (it != t.intermediate.end()) at_step.push_back(it->second);
  }
  if (static_cast<int64_t>(at_step.size()) < o_.n_min_trials) return false;
  const double q = direction_ == Direction::Maximize ? 100 - o_.percentile : o_.percentile;
  const double p = nan_percentile(std::move(at_step), q);
  if (std::isnan(p)) return false;
  return direction_ == Direction::Maximize ? best < p : best > p;
}

}  // namespace ftune::hpo
