// The cost of a study from its trials' times (see study_cost.h).
#include "hpo/study_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ftune::hpo {
namespace {

// The span a trial has run, [start, end or now]; nullopt where it has not started or its times
// are unusable.
std::optional<std::pair<double, double>> span(const Trial& t, double now) {
  if (t.state == TrialState::Waiting || !(t.start_time > 0) || !std::isfinite(t.start_time))
    return std::nullopt;
  const double end = t.state == TrialState::Running ? std::max(now, t.start_time) : t.end_time;
  if (!std::isfinite(end) || end < t.start_time) return std::nullopt;
  return std::make_pair(t.start_time, end);
}

int64_t train_samples_of(const Trial& t) {
  const auto it = t.attrs.find("train_samples");
  return it != t.attrs.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// 1204800 -> "1,204,800".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

bool reaches(double value, double target, Direction d) {
  return d == Direction::Maximize ? value >= target : value <= target;
}

}  // namespace

StudyCost study_cost(const std::vector<Trial>& trials, Direction direction, double now) {
  StudyCost cost;
  std::vector<std::pair<double, double>> spans;
  struct Rows {
    double end = 0;
    int64_t rows = 0;
    bool running = false;
  };
  std::vector<Rows> samples;  // per trial, as `spans`
  std::vector<const Trial*> ended;  // complete trials with a value, to order by their end
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (const Trial& t : trials) {
    const auto s = span(t, now);
    if (!s) continue;
    const double seconds = s->second - s->first;
    switch (t.state) {
      case TrialState::Complete:
        cost.complete_s += seconds, ++cost.complete;
        break;
      case TrialState::Pruned:
        cost.pruned_s += seconds, ++cost.pruned;
        break;
      case TrialState::Failed:
        cost.failed_s += seconds, ++cost.failed;
        break;
      case TrialState::Running:
        cost.running_s += seconds, ++cost.running;
        break;
      case TrialState::Waiting:
        break;
    }
    spans.push_back(*s);
    cost.train_samples += train_samples_of(t);
    samples.push_back({s->second, train_samples_of(t), t.state == TrialState::Running});
    first = std::min(first, s->first);
    last = std::max(last, s->second);
    if (t.state == TrialState::Complete && t.value && std::isfinite(*t.value)) ended.push_back(&t);
  }
  if (spans.empty()) return cost;
  cost.wall_s = last - first;
  std::sort(ended.begin(), ended.end(), [](const Trial* a, const Trial* b) {
    return a->end_time != b->end_time ? a->end_time < b->end_time : a->number < b->number;
  });
  std::optional<double> best;
  for (const Trial* t : ended) {
    if (best && !(direction == Direction::Maximize ? *t->value > *best : *t->value < *best))
      continue;
    best = *t->value;
    const double at = t->end_time;
    double compute = 0;  // every trial's time up to `at`
    for (const auto& [start, end] : spans) compute += std::max(0.0, std::min(end, at) - start);
    int64_t rows = 0;  // trials ended by `at`, and the running ones as far as they are
    for (size_t i = 0; i < spans.size(); ++i)
      if (samples[i].end <= at || (samples[i].running && spans[i].first < at))
        rows += samples[i].rows;
    cost.best_curve.push_back({compute, at - first, *best, t->number, rows});
  }
  return cost;
}

std::optional<StudyCost::Point> first_reaching(const StudyCost& cost, double target,
                                               Direction direction) {
  for (const StudyCost::Point& p : cost.best_curve)
    if (reaches(p.best, target, direction)) return p;
  return std::nullopt;
}

std::string cost_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds >= 3600) return fmt::format("{:.1f} h", seconds / 3600);
  if (seconds >= 60) return fmt::format("{:.1f} min", seconds / 60);
  return fmt::format("{:.0f} s", seconds);
}

std::string cost_lines(const StudyCost& cost) {
  const int64_t counted = cost.complete + cost.pruned + cost.failed + cost.running;
  std::string out = fmt::format(
      "compute: {} in {} trial{} (complete {}, pruned {}, failed {}, running {}); wall {}\n",
      cost_text(cost.compute_s()), counted, counted == 1 ? "" : "s", cost_text(cost.complete_s),
      cost_text(cost.pruned_s), cost_text(cost.failed_s), cost_text(cost.running_s),
      cost_text(cost.wall_s));
  if (!cost.best_curve.empty()) {
    const StudyCost::Point& p = cost.best_curve.back();
    out += fmt::format("best {} (trial {}) reached after {} of compute, {} of wall time\n", p.best,
                       p.trial, cost_text(p.compute_s), cost_text(p.wall_s));
  }
  if (cost.train_samples > 0) {
    out += fmt::format("trained {} rows", grouped(cost.train_samples));
    if (!cost.best_curve.empty())
      out += fmt::format("; the best after {}", grouped(cost.best_curve.back().train_samples));
    out += "\n";
  }
  return out;
}

}  // namespace ftune::hpo
