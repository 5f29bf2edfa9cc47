// Where a study lives: its direction and search space, and every trial with its parameters,
// intermediate (step) and fold values, heartbeat and final state. Several worker processes (on
// one machine with SQLite, on many with PostgreSQL) share one storage; every operation is a short
// transaction, trial numbers are handed out atomically (0, 1, 2, ... never twice), and a trial
// whose worker died (no heartbeat for a grace period) is failed and retried.
//
// A trial's end is final, as in Optuna: once a trial is COMPLETE, PRUNED or FAIL (a worker that
// stalled past the grace period included: another worker failed it as stale and queued a retry,
// a new trial with the same params), every later write to it (params, reports, finish) is refused
// with TrialNotRunning and changes nothing, so no trial ends twice and no value that samplers,
// pruners or reports have taken as final changes under them. Each state change is a
// compare-and-set on state = 'RUNNING' (or 'WAITING') inside one transaction.
//
// open_storage("sqlite:///path/study.db" | "path/study.db" | "postgresql://user@host:port/db").
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hpo/trial.h"

namespace ftune::hpo {

// A write to a trial that is not RUNNING any more was refused; nothing of it was stored. what()
// names the trial, what was discarded and why: e.g. "trial 3: its result (COMPLETE, value 0.25)
// was discarded: the trial was failed as stale at 2026-11-23 03:12:27 UTC (no heartbeat for
// more than 60 s ...) and retried as trial 9".
class TrialNotRunning : public Error {
 public:
  // `discarded`: what the refused write carried ("its result (COMPLETE, value 0.25)").
  TrialNotRunning(int64_t number, TrialState state, double end_time, std::string error,
                  std::optional<int64_t> retried_as, const std::string& discarded);

  int64_t number;                     // the trial's number in its study
  TrialState state;                   // what the trial is now
  double end_time;                    // when it ended (seconds since the epoch; 0: not ended)
  std::string error;                  // FAIL: why (the stale check's "no heartbeat ...")
  std::optional<int64_t> retried_as;  // the number of the retry queued for it, if any
};

struct StudyInfo {
  int64_t id = -1;
  std::string name;
  Direction direction = Direction::Minimize;
  nlohmann::json space;  // the search space's canonical JSON, as created
};

// Finished trials past a point of the study's finish order, and the point to ask from next time.
struct FinishedBatch {
  std::vector<Trial> trials;  // in the order they finished
  int64_t cursor = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Creates the study, or loads it when it exists with the same direction and space. A study of
  // that name created with another direction or space raises InputError saying what differs.
  virtual StudyInfo create_or_load_study(const std::string& name, Direction direction,
                                         const nlohmann::json& space) = 0;
  // nullopt when no study has that name.
  virtual std::optional<StudyInfo> find_study(const std::string& name) = 0;
  virtual std::vector<StudyInfo> studies() = 0;

  // Starts a trial for this worker: the oldest WAITING trial (a retry, its params already set)
  // when there is one, else a new trial with the next number, if fewer than `max_trials` trials
  // count towards the budget (all trials but failed ones that were retried; max_trials < 0: no
  // limit). The trial is RUNNING with a fresh heartbeat. nullopt: the budget is used up.
  virtual std::optional<Trial> start_trial(int64_t study_id, int64_t max_trials = -1) = 0;
  // The writes of a trial's worker. Each applies only while the trial is RUNNING (checked and
  // written in one transaction) and refreshes its heartbeat; otherwise TrialNotRunning.
  virtual void set_params(int64_t trial_id, const Params& params,
                          const std::map<std::string, Distribution>& distributions) = 0;
  virtual void report_intermediate(int64_t trial_id, int64_t step, double value) = 0;
  virtual void report_fold(int64_t trial_id, int64_t fold, double value) = 0;
  // Records (or replaces) an attribute of the trial (Trial::attrs[key] = value).
  virtual void set_attr(int64_t trial_id, const std::string& key, const nlohmann::json& value) = 0;
  // Refreshes the trial's heartbeat; false when it is no longer RUNNING (another worker failed
  // it as stale), so its worker should stop it.
  virtual bool heartbeat(int64_t trial_id) = 0;
  // Ends a RUNNING trial as Complete (value required), Pruned (value: last intermediate, may be
  // nullopt) or Failed (error says why). TrialNotRunning when it was not RUNNING any more (a
  // late result of a trial failed as stale: discarded, its retry stands in for it).
  virtual void finish(int64_t trial_id, TrialState state, std::optional<double> value,
                      const std::string& error) = 0;
  // Queues a WAITING copy of a Failed trial (same params, retry_of = its number) unless it was
  // already retried or `max_retries` retries of the original were made. Returns the new trial's
  // number, or nullopt.
  virtual std::optional<int64_t> enqueue_retry(int64_t trial_id, int max_retries) = 0;
  // Fails every RUNNING trial of the study whose heartbeat is older than `grace_s` seconds (error
  // "no heartbeat for ...") and queues its retry (up to `max_retries`). Returns how many failed;
  // a trial whose heartbeat or finish commits first is left alone.
  virtual int fail_stale(int64_t study_id, double grace_s, int max_retries) = 0;

  virtual std::vector<Trial> trials(int64_t study_id) = 0;
  virtual std::optional<Trial> trial(int64_t trial_id) = 0;
  // The trial with this number in the study (e.g. the one a retry retries); nullopt when none.
  virtual std::optional<Trial> find_trial(int64_t study_id, int64_t number) = 0;
  virtual std::vector<Trial> running_trials(int64_t study_id) = 0;
  // Trials that finished after `cursor` (0: from the start), each exactly once across calls:
  // a worker feeds its sampler in O(new trials).
  virtual FinishedBatch finished_since(int64_t study_id, int64_t cursor) = 0;
  // Counts by state: index by static_cast<int>(TrialState).
  virtual std::array<int64_t, 5> count_by_state(int64_t study_id) = 0;

  virtual std::string describe() const = 0;  // URL, without password
};

// How a storage is opened. A writer (`hpo run`, the default) creates what is missing and waits
// out a busy database for up to five minutes. A reader (`hpo status|best|export`, `ftune
// report|dashboard`) opens a storage that already holds ftune's tables, read-only: it creates and
// writes nothing (a missing SQLite file is an InputError naming it), and a database locked by
// another process for longer than `busy_wait_s` is an error saying so, not a wait of minutes.
struct StorageAccess {
  bool read_only = false;
  double busy_wait_s = 300.0;
  static StorageAccess reader(double busy_wait_s = 10.0) { return {true, busy_wait_s}; }
};

// Opens (a writer: and on first use initialises) the storage at `url`. InputError naming the URL
// when it is malformed or the database cannot be reached.
std::unique_ptr<Storage> open_storage(const std::string& url, StorageAccess access = {});
// The SQLite file of a storage URL as open_storage reads it; empty for a database server.
std::string storage_file(const std::string& url);

// "minimize" / "maximize"; parsing raises InputError naming `where` for anything else.
const char* direction_name(Direction d);
Direction parse_direction_name(const std::string& s, const std::string& where);
// The inverse of to_string(TrialState); InternalError for an unknown name.
TrialState parse_trial_state(const std::string& s);

}  // namespace ftune::hpo
