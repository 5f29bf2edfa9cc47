// The worker loop (see worker.h): trial life cycle, heartbeat thread, reports and pruning, and
// what a worker does when its trial was taken away (failed as stale by another worker after a
// stall): it stops the trial and logs which result was discarded and which trial retries it.
#include "hpo/worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "hpo/interrupt.h"

namespace ftune::hpo {

namespace {

using Clock = std::chrono::steady_clock;

// Refreshes a trial's heartbeat every period until stopped, or until the trial is taken away
// (failed as stale by another worker after a long stall; the worker learns it from its next
// write, which the storage refuses). With a deadline: calls `on_deadline` once when it passes,
// and beats no more from `deadline + kill_grace` on (the trial did not stop: its worker hangs).
class HeartbeatThread {
 public:
  HeartbeatThread(Storage& storage, int64_t trial_id, double period_s,
                  std::optional<Clock::time_point> deadline, double kill_grace_s,
                  std::function<void()> on_deadline)
      : thread_([this, &storage, trial_id, period_s, deadline, kill_grace_s,
                 on_deadline = std::move(on_deadline)] {
          std::unique_lock lock(mutex_);
          const auto period =
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period_s));
          const auto grace = std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double>(kill_grace_s));
          bool stop_asked = false;
          for (;;) {
            auto wake = Clock::now() + period;
            if (deadline && !stop_asked) wake = std::min(wake, *deadline);
            if (cv_.wait_until(lock, wake, [this] { return stop_; })) return;
            lock.unlock();
            if (deadline && !stop_asked && Clock::now() >= *deadline) {
              stop_asked = true;
              on_deadline();
            }
            if (deadline && Clock::now() >= *deadline + grace) {
              spdlog::warn(
                  "trial id {} did not stop within kill_grace_s ({} s) after its timeout; its "
                  "heartbeat stops, so another worker will fail it as stale",
                  trial_id, kill_grace_s);
              return;
            }
            bool alive = true;
            try {
              alive = storage.heartbeat(trial_id);
            } catch (const std::exception& e) {
              spdlog::warn("heartbeat of trial id {} failed: {}", trial_id, e.what());
            }
            lock.lock();
            if (!alive) return;
          }
        }) {}
  ~HeartbeatThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

// What "the same error" means for max_consecutive_failures: the message with every run of digits
// replaced by '#', so that trial numbers, run directories and sizes do not make two identical
// failures look different.
std::string failure_signature(const std::string& error) {
  std::string out;
  for (size_t i = 0; i < error.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(error[i]))) {
      if (out.empty() || out.back() != '#') out.push_back('#');
    } else {
      out.push_back(error[i]);
    }
  }
  return out;
}

}  // namespace

// Stores reports and asks the pruner; the trial it holds is the running trial as the pruner sees
// it (with every value reported so far). A report the storage refuses (the trial was failed as
// stale meanwhile) says "stop" and keeps the storage's reason.
class WorkerReporter : public TrialReporter {
 public:
  WorkerReporter(Storage& storage, const StudyInfo& study, Trial& trial, const Pruner* pruner,
                 std::vector<Trial>& finished, std::function<void()> catch_up)
      : storage_(storage),
        study_(study),
        trial_(trial),
        pruner_(pruner),
        finished_(finished),
        catch_up_(std::move(catch_up)) {}

  bool stop_requested() const override { return stop_requested_.load(); }
  void request_stop() { stop_requested_.store(true); }
  const Trial* retried() const override { return retried_ ? &*retried_ : nullptr; }
  void set_retried(std::optional<Trial> t) { retried_ = std::move(t); }
  void set_attr(const std::string& key, const nlohmann::json& value) override {
    if (taken_away_) return;
    try {
      storage_.set_attr(trial_.id, key, value);
    } catch (const TrialNotRunning& e) {
      take_away(e);
      return;
    }
    trial_.attrs[key] = value;
  }

  bool report(int64_t step, double value) override {
    if (taken_away_) return true;
    try {
      storage_.report_intermediate(trial_.id, step, value);
    } catch (const TrialNotRunning& e) {
      return take_away(e);
    }
    trial_.intermediate[step] = value;
    if (!pruner_) return false;
    // The pruner compares with every trial of the study: the finished ones (kept incrementally)
    // and those still running, this one with its newest values.
    // They are appended to the finished list for the call and removed after it: no copy of the
    // (possibly long) history per report.
    catch_up_();
    const size_t n_finished = finished_.size();
    try {
      for (Trial& t : storage_.running_trials(study_.id))
        if (t.id != trial_.id) finished_.push_back(std::move(t));
      finished_.push_back(trial_);
      if (pruner_->should_prune(trial_, step, finished_)) should_stop_ = true;
    } catch (...) {
      finished_.resize(n_finished);
      throw;
    }
    finished_.resize(n_finished);
    return should_stop_;
  }

  using TrialReporter::report_fold;
  bool report_fold(int64_t fold, double value, int64_t step) override {
    if (taken_away_) return true;
    try {
      storage_.report_fold(trial_.id, fold, value);
    } catch (const TrialNotRunning& e) {
      return take_away(e);
    }
    trial_.fold_values[fold] = value;
    double sum = 0;
    for (const auto& [k, v] : trial_.fold_values) sum += v;
    return report(step, sum / static_cast<double>(trial_.fold_values.size()));
  }

  bool should_stop() const { return should_stop_; }
  // Not empty once the storage refused a report: why (TrialNotRunning's message).
  const std::string& taken_away() const { return taken_away_reason_; }

 private:
  bool take_away(const TrialNotRunning& e) {
    taken_away_ = true;
    taken_away_reason_ = e.what();
    return should_stop_ = true;
  }

  Storage& storage_;
  const StudyInfo& study_;
  Trial& trial_;
  const Pruner* pruner_;
  std::vector<Trial>& finished_;  // the worker's; running trials are appended for a moment
  std::function<void()> catch_up_;
  bool should_stop_ = false;
  bool taken_away_ = false;
  std::string taken_away_reason_;
  std::atomic<bool> stop_requested_{false};  // set by the heartbeat thread at the deadline
  std::optional<Trial> retried_;
};

Worker::Worker(Storage& storage, const StudyInfo& study, const SearchSpace& space, Sampler& sampler,
               const Pruner* pruner, Objective& objective, WorkerOptions options)
    : storage_(storage),
      study_(study),
      space_(space),
      sampler_(sampler),
      pruner_(pruner),
      objective_(objective),
      options_(options) {
  if (options_.heartbeat_s <= 0 || options_.grace_s <= options_.heartbeat_s)
    throw InputError(fmt::format("grace_s ({}) must be larger than heartbeat_s ({}) > 0",
                                 options_.grace_s, options_.heartbeat_s));
  if (options_.trial_timeout_s < 0 || options_.kill_grace_s < 0 ||
      options_.max_consecutive_failures < 0 || options_.failure_backoff_s < 0)
    throw InputError(
        "trial_timeout_s, kill_grace_s, max_consecutive_failures and failure_backoff_s must "
        "be >= 0");
  // A grid (or any finite) sampler bounds the budget by its number of points.
  if (auto n = sampler_.max_trials(space_))
    options_.max_trials = options_.max_trials < 0 ? *n : std::min(options_.max_trials, *n);
}

void Worker::catch_up() {
  FinishedBatch b = storage_.finished_since(study_.id, cursor_);
  cursor_ = b.cursor;
  for (Trial& t : b.trials) {
    sampler_.observe(t);
    finished_.push_back(std::move(t));
  }
}

WorkerStats Worker::run() {
  WorkerStats stats;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  // While the budget is spent but others' trials still run, poll at this period.
  const double poll_s = std::min(0.2, options_.heartbeat_s);
  int failures_in_a_row = 0, same_in_a_row = 0;
  std::string last_signature;
  for (;;) {
    if (options_.timeout_s > 0 && elapsed() >= options_.timeout_s) break;
    if (interrupted()) break;
    storage_.fail_stale(study_.id, options_.grace_s, options_.retries);
    std::optional<Trial> trial = storage_.start_trial(study_.id, options_.max_trials);
    if (!trial) {
      if (storage_.running_trials(study_.id).empty()) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(poll_s));
      continue;
    }
    const std::optional<std::string> error = run_trial(std::move(*trial), stats);
    if (!error) {
      failures_in_a_row = same_in_a_row = 0;
      last_signature.clear();
      continue;
    }
    if (interrupted()) break;
    ++failures_in_a_row;
    const std::string signature = failure_signature(*error);
    same_in_a_row = signature == last_signature ? same_in_a_row + 1 : 1;
    last_signature = signature;
    if (options_.max_consecutive_failures > 0 &&
        same_in_a_row >= options_.max_consecutive_failures) {
      stats.gave_up = fmt::format(
          "{} trials in a row failed with the same error (max_consecutive_failures: {}); the "
          "last: {}",
          same_in_a_row, options_.max_consecutive_failures, *error);
      break;
    }
    // Back-off: a transient cause (a busy device, a full disk being cleared) gets time to pass,
    // and a broken setup does not fail trials by the thousand meanwhile.
    const double wait_s =
        std::min(60.0, options_.failure_backoff_s * std::pow(2.0, failures_in_a_row - 1));
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(wait_s));
    while (Clock::now() < until && !interrupted())
      std::this_thread::sleep_for(
          std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(50)));
  }
  return stats;
}

std::optional<std::string> Worker::run_trial(Trial trial, WorkerStats& stats) {
  std::string error;
  std::optional<double> value;
  TrialState state = TrialState::Failed;
  WorkerReporter reporter(storage_, study_, trial, pruner_, finished_, [this] { catch_up(); });
  std::optional<Clock::time_point> deadline;
  if (options_.trial_timeout_s > 0)
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(options_.trial_timeout_s));
  std::atomic<bool> timed_out{false};
  HeartbeatThread heartbeat(storage_, trial.id, options_.heartbeat_s, deadline,
                            options_.kill_grace_s, [&] {
                              timed_out.store(true);
                              spdlog::warn("trial {} ran past trial_timeout_s ({} s): stopping it",
                                           trial.number, options_.trial_timeout_s);
                              reporter.request_stop();
                            });
  std::string taken_away;  // why the storage refused the params (the trial is not ours any more)
  try {
    catch_up();
    if (trial.params.empty()) {  // a new trial; a retry keeps the params of the one it retries
      std::vector<Trial> running = storage_.running_trials(study_.id);
      std::erase_if(running, [&](const Trial& t) { return t.id == trial.id; });
      trial.params = sampler_.sample(space_, trial.number, running);
      for (const auto& p : space_.params())
        if (trial.params.count(p.name)) trial.distributions[p.name] = p.dist;
      storage_.set_params(trial.id, trial.params, trial.distributions);
    }
    if (trial.retry_of >= 0) reporter.set_retried(storage_.find_trial(study_.id, trial.retry_of));
    const double v = objective_.run(trial, space_, reporter);
    if (reporter.should_stop()) {
      state = TrialState::Pruned;
    } else if (std::isnan(v)) {
      error = "the objective returned NaN";
    } else {
      state = TrialState::Complete;  // finished right at its deadline: its result stands
      value = v;
    }
  } catch (const TrialNotRunning& e) {
    taken_away = e.what();
  } catch (const TrialPruned&) {
    state = TrialState::Pruned;
  } catch (const std::exception& e) {
    if (reporter.should_stop())
      state = TrialState::Pruned;  // stopped by force after a prune
    else
      error = e.what();
  }
  if (state == TrialState::Failed && timed_out.load())
    error = fmt::format("trial_timeout_s: the trial ran for more than {} s and was stopped",
                        options_.trial_timeout_s);
  if (taken_away.empty()) taken_away = reporter.taken_away();
  if (!taken_away.empty()) {
    // Another worker failed the trial as stale while this one stalled; its retry (if any) runs
    // the same params. Nothing more of this run is stored.
    ++stats.discarded;
    spdlog::warn("{}; stopped it here", taken_away);
    return std::nullopt;
  }
  if (state == TrialState::Pruned) {
    value = trial.last_intermediate();
    if (value && std::isnan(*value)) value.reset();
  }
  try {
    storage_.finish(trial.id, state, value, error);
  } catch (const TrialNotRunning& e) {
    ++stats.discarded;
    spdlog::warn("{}", e.what());
    return std::nullopt;
  }
  switch (state) {
    case TrialState::Complete:
      ++stats.complete;
      spdlog::info("trial {} complete: {}", trial.number, *value);
      return std::nullopt;
    case TrialState::Pruned:
      ++stats.pruned;
      spdlog::info("trial {} pruned at step {}", trial.number,
                   trial.intermediate.empty() ? -1 : trial.intermediate.rbegin()->first);
      return std::nullopt;
    default:
      ++stats.failed;
      spdlog::warn("trial {} failed: {}", trial.number, error);
      if (options_.retry_failed && !interrupted()) {
        if (auto n = storage_.enqueue_retry(trial.id, options_.retries))
          spdlog::info("trial {} will be retried as trial {}", trial.number, *n);
      }
      return error;
  }
}

}  // namespace ftune::hpo
