// One worker of a study: the loop that many processes (or machines) run side by side on one
// storage. Each round fails stale trials of dead workers (and queues their retries), feeds the
// sampler the trials that finished since the last round, starts a trial (a queued retry first),
// samples its params (the sampler sees the running trials: constant liar), runs the objective
// while a thread keeps its heartbeat fresh, stores its reports, asks the pruner after each, and
// finishes it. The worker stops when the study's trial budget is spent and no trial of another
// worker is still running (one may yet fail and need a retry), or when the timeout passes (the
// trial in flight is finished first), or on Ctrl-C / SIGTERM (interrupt.h: the trial in flight
// ends FAILED "interrupted"). A trial that another worker failed as stale while this one stalled
// is final (storage.h): this worker stops it at its next report, or finds at its end that the
// result is refused, and logs what was discarded, when the trial failed and which trial retries it.
//
// Failing fast: after a failed trial the worker waits (failure_backoff_s, doubling with each
// failure in a row, at most 60 s) before the next, and it stops after max_consecutive_failures
// failures in a row with the same error (numbers in the message ignored: trial numbers, paths),
// so that a configuration every trial fails on does not churn through the study's budget. A
// trial that runs past trial_timeout_s is asked to stop (the objective polls it) and fails with
// that reason; if it has not stopped kill_grace_s later, its heartbeat stops too, so another
// worker can fail it as stale even when this one hangs for good.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpo/objective.h"
#include "hpo/pruner.h"
#include "hpo/sampler.h"
#include "hpo/search_space.h"
#include "hpo/storage.h"

namespace ftune::hpo {

struct WorkerOptions {
  int64_t max_trials = -1;    // study-wide budget of trials (see Storage::start_trial); < 0: none
  double timeout_s = 0;       // > 0: start no trial after this many seconds
  double heartbeat_s = 10;    // heartbeat period of a running trial
  double grace_s = 60;        // a RUNNING trial without heartbeat for this long is failed
  int retries = 1;            // retries of a trial whose worker died
  bool retry_failed = false;  // also retry trials whose objective raised (same limit)
  double trial_timeout_s = 0;        // > 0: a trial running longer fails ("trial_timeout_s")
  double kill_grace_s = 10;          // after a timeout: how long the objective has to stop
  int max_consecutive_failures = 5;  // stop after this many failures in a row, same error; 0: never
  double failure_backoff_s = 1;      // wait after a failed trial, doubled per failure in a row
};

struct WorkerStats {
  int64_t complete = 0, pruned = 0, failed = 0;
  // Trials this worker ran but another worker had failed as stale meanwhile (this worker stalled
  // past the grace period): their late results were discarded (logged), their retries count.
  int64_t discarded = 0;
  // Not empty when the worker stopped early because its trials kept failing: why.
  std::string gave_up;
  int64_t total() const { return complete + pruned + failed; }
};

class Worker {
 public:
  // `pruner` may be null (never prune). All references must outlive the worker.
  Worker(Storage& storage, const StudyInfo& study, const SearchSpace& space, Sampler& sampler,
         const Pruner* pruner, Objective& objective, WorkerOptions options);
  // Runs trials until the budget or the timeout; returns what this worker's trials became.
  WorkerStats run();

 private:
  void catch_up();  // feeds the sampler (and the pruner's view) the newly finished trials
  // Runs the trial to its end; returns its error when this worker failed it.
  std::optional<std::string> run_trial(Trial trial, WorkerStats& stats);

  Storage& storage_;
  StudyInfo study_;
  const SearchSpace& space_;
  Sampler& sampler_;
  const Pruner* pruner_;
  Objective& objective_;
  WorkerOptions options_;
  int64_t cursor_ = 0;
  std::vector<Trial> finished_;  // every finished trial seen so far, in finish order

  friend class WorkerReporter;
};

}  // namespace ftune::hpo
