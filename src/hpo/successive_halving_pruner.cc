// Successive halving (ASHA) and Hyperband, ports of optuna/pruners/_successive_halving.py and
// _hyperband.py. Optuna stores "completed_rung_<r>" on a trial the first time a report reaches
// rung r's promotion step (min_resource * reduction_factor^(min_early_stopping_rate + r)); here
// the same values are read back from each trial's reports (see pruner.h for when that is exact).
#include "hpo/successive_halving_pruner.h"

#include <algorithm>
#include <cmath>

namespace ftune::hpo {
namespace {

// min_resource * rf^(rate + rung), saturating instead of overflowing.
int64_t promotion_step(int64_t min_resource, int64_t rf, int64_t exponent) {
  int64_t v = min_resource;
  for (int64_t i = 0; i < exponent; ++i) {
    if (v > INT64_MAX / rf) return INT64_MAX;
    v *= rf;
  }
  return v;
}

// The values a trial recorded at its rungs 0, 1, ... from its reports at steps < `before`.
std::vector<double> rung_values(const Trial& t, int64_t min_resource, int64_t rf, int64_t rate,
                                int64_t before) {
  std::vector<double> out;
  for (const auto& [s, v] : t.intermediate) {
    if (s >= before) break;
    while (s >= promotion_step(min_resource, rf, rate + static_cast<int64_t>(out.size()))) {
      if (std::isnan(v)) break;  // Optuna prunes on NaN before recording the rung
      out.push_back(v);
    }
  }
  return out;
}

bool promotable(double value, std::vector<double> competing, int64_t rf, Direction d) {
  int64_t idx = static_cast<int64_t>(competing.size()) / rf - 1;
  if (idx == -1) idx = 0;
  std::sort(competing.begin(), competing.end());
  if (d == Direction::Maximize) return value >= competing[competing.size() - 1 - idx];
  return value <= competing[idx];
}

}  // namespace

const Trial* first_completed(const std::vector<Trial>& trials) {
  const Trial* first = nullptr;
  for (const auto& t : trials) {
    if (t.state != TrialState::Complete || t.intermediate.empty()) continue;
    if (!first || t.end_time < first->end_time ||
        (t.end_time == first->end_time && t.number < first->number))
      first = &t;
  }
  return first;
}

uint32_t crc32(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

bool SuccessiveHalvingPruner::should_prune(const Trial& trial, int64_t step,
                                           const std::vector<Trial>& trials) const {
  std::vector<const Trial*> all;
  all.reserve(trials.size());
  for (const auto& t : trials) all.push_back(&t);
  return should_prune_among(trial, step, all, trials);
}

bool SuccessiveHalvingPruner::should_prune_among(const Trial& trial, int64_t step,
                                                 const std::vector<const Trial*>& competitors,
                                                 const std::vector<Trial>& all) const {
  if (trial.intermediate.empty()) return false;
  int64_t min_resource = 0;
  if (o_.min_resource) {
    min_resource = *o_.min_resource;
  } else {
    const Trial* first = first_completed(all);
    if (!first) return false;
    min_resource = std::max<int64_t>(first->intermediate.rbegin()->first / 100, 1);
  }
  const int64_t rf = o_.reduction_factor, rate = o_.min_early_stopping_rate;
  // With an "auto" resource Optuna records nothing until a trial has completed: trials that
  // finished by then (the first completed one included) hold no rung values.
  const Trial* first = auto_resource_ ? first_completed(all) : nullptr;
  if (auto_resource_ && !first) return false;
  auto recorded = [&](const Trial& t) {
    return !(first && t.finished() && t.end_time <= first->end_time);
  };
  auto it = trial.intermediate.find(step);
  const double value = it != trial.intermediate.end() ? it->second : *trial.last_intermediate();
  auto rung = static_cast<int64_t>(rung_values(trial, min_resource, rf, rate, step).size());
  std::vector<std::vector<double>> others;
  for (const Trial* t : competitors)
    if (t->number != trial.number && recorded(*t))
      others.push_back(rung_values(*t, min_resource, rf, rate, INT64_MAX));
  while (true) {
    if (step < promotion_step(min_resource, rf, rate + rung)) return false;
    if (std::isnan(value)) return true;
    std::vector<double> competing;
    for (const auto& r : others)
      if (static_cast<int64_t>(r.size()) > rung) competing.push_back(r[rung]);
    competing.push_back(value);
    if (static_cast<int64_t>(competing.size()) <= o_.bootstrap_count) return true;
    if (!promotable(value, std::move(competing), rf, direction_)) return true;
    ++rung;
  }
}

int64_t HyperbandPruner::bracket_of(int64_t number, int64_t max_resource) const {
  const int64_t rf = o_.reduction_factor;
  // floor(log_rf(max / min)) + 1 brackets. An "auto" max_resource below min_resource would leave
  // none (Optuna divides by zero there): one bracket, plain successive halving.
  const int64_t n_brackets = std::max<int64_t>(
      static_cast<int64_t>(std::floor(
          std::log(static_cast<double>(max_resource) / static_cast<double>(o_.min_resource)) /
          std::log(static_cast<double>(rf)))) +
          1,
      1);
  std::vector<int64_t> budgets;
  int64_t total = 0;
  for (int64_t b = 0; b < n_brackets; ++b) {
    const int64_t s = n_brackets - 1 - b;
    const double budget =
        std::ceil(static_cast<double>(n_brackets) * std::pow(static_cast<double>(rf), s) / (s + 1));
    budgets.push_back(static_cast<int64_t>(budget));
    total += budgets.back();
  }
  auto n = static_cast<int64_t>(crc32(study_name_ + "_" + std::to_string(number)) % total);
  for (int64_t b = 0; b < n_brackets; ++b) {
    n -= budgets[b];
    if (n < 0) return b;
  }
  return n_brackets - 1;
}

bool HyperbandPruner::should_prune(const Trial& trial, int64_t step,
                                   const std::vector<Trial>& trials) const {
  int64_t max_resource = 0;
  if (o_.max_resource) {
    max_resource = *o_.max_resource;
  } else {
    const Trial* first = first_completed(trials);
    if (!first) return false;
    max_resource = first->intermediate.rbegin()->first + 1;
  }
  const int64_t bracket = bracket_of(trial.number, max_resource);
  std::vector<const Trial*> in_bracket;
  for (const auto& t : trials)
    if (bracket_of(t.number, max_resource) == bracket) in_bracket.push_back(&t);
  SuccessiveHalvingPruner sh({o_.min_resource, o_.reduction_factor, bracket, o_.bootstrap_count},
                             direction_);
  sh.auto_resource_ = !o_.max_resource.has_value();
  return sh.should_prune_among(trial, step, in_bracket, trials);
}

}  // namespace ftune::hpo
