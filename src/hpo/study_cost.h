// What a study has cost so far, from its trials' start and end times as stored: the compute time
// (the sum of every trial's own wall time: what one device running the trials one after another
// would have spent) by how the trials ended, the study's wall-clock span, and the best complete
// value against both — the curve a user reads to see how much compute a given model quality
// needed (`ftune hpo status`, the study report, bench/study_vs_optuna).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpo/trial.h"

namespace ftune::hpo {

struct StudyCost {
  // Seconds of trial time by state; a running trial counts up to `now`, a waiting one not at all.
  double complete_s = 0, pruned_s = 0, failed_s = 0, running_s = 0;
  int64_t complete = 0, pruned = 0, failed = 0, running = 0;
  double wall_s = 0;  // the first trial's start to the last end (or `now` while one runs)
  // Training rows the trials processed (epochs x rows, over all folds; a pruned trial's up to
  // where it stopped), from the attribute "train_samples" the train_config objective records
  // after each fold's run: compute in a unit that a loaded or different machine does not change.
  // 0 for trials without it (a command objective's).
  int64_t train_samples = 0;

  // One point per improvement of the best complete value, in the order the trials ended (ties by
  // number): the compute used by then (every trial's time up to that moment, the ones still
  // running then included), the wall time since the study's first start, the value, the trial.
  struct Point {
    double compute_s = 0, wall_s = 0, best = 0;
    int64_t trial = -1;
    int64_t train_samples = 0;  // of the trials ended by then, and the running ones' so far
  };
  std::vector<Point> best_curve;

  double compute_s() const { return complete_s + pruned_s + failed_s + running_s; }
};

// `now` in seconds since the epoch (as the trials' times); trials whose times are missing (no
// start, or an end before the start: a storage edited by hand) are left out of the sums.
StudyCost study_cost(const std::vector<Trial>& trials, Direction direction, double now);

// The first point of the curve whose best value reaches `target` (>= when maximizing, <= when
// minimizing): the compute and wall time the study needed to get there. nullopt: never.
std::optional<StudyCost::Point> first_reaching(const StudyCost& cost, double target,
                                               Direction direction);

// "12.4 h" / "37.0 min" / "52 s": a cost in the unit that reads best.
std::string cost_text(double seconds);

// The lines `ftune hpo status` prints under the counts:
//   compute: 3.1 h in 40 trials (complete 2.2 h, pruned 0.7 h, failed 0.2 h, running 0 s);
//     wall 1.6 h
//   best 0.912 (trial 31) reached after 2.4 h of compute, 1.3 h of wall time
//   trained 1,204,800 rows; the best after 880,000
std::string cost_lines(const StudyCost& cost);

}  // namespace ftune::hpo
