// The Storage implementation over an SqlConnection (SQLite or PostgreSQL): schema, the short
// write transactions behind each operation, and retries with back-off when the database says
// "busy" so that no "database is locked" ever reaches the user.
#pragma once

#include <memory>
#include <mutex>

#include "hpo/sql_connection.h"
#include "hpo/storage.h"

namespace ftune::hpo {

class SqlStorage : public Storage {
 public:
  // `postgres` selects the few dialect differences (auto-increment keys, schema lock). A reader
  // (access.read_only) refuses (InputError) a database without ftune's tables instead of creating
  // them, and writes nothing. A busy database is retried for access.busy_wait_s.
  SqlStorage(std::unique_ptr<SqlConnection> conn, bool postgres, StorageAccess access = {});

  StudyInfo create_or_load_study(const std::string& name, Direction direction,
                                 const nlohmann::json& space) override;
  std::optional<StudyInfo> find_study(const std::string& name) override;
  std::vector<StudyInfo> studies() override;
  std::optional<Trial> start_trial(int64_t study_id, int64_t max_trials) override;
  void set_params(int64_t trial_id, const Params& params,
                  const std::map<std::string, Distribution>& distributions) override;
  void report_intermediate(int64_t trial_id, int64_t step, double value) override;
  void report_fold(int64_t trial_id, int64_t fold, double value) override;
  void set_attr(int64_t trial_id, const std::string& key, const nlohmann::json& value) override;
  bool heartbeat(int64_t trial_id) override;
  void finish(int64_t trial_id, TrialState state, std::optional<double> value,
              const std::string& error) override;
  std::optional<int64_t> enqueue_retry(int64_t trial_id, int max_retries) override;
  int fail_stale(int64_t study_id, double grace_s, int max_retries) override;
  std::vector<Trial> trials(int64_t study_id) override;
  std::optional<Trial> trial(int64_t trial_id) override;
  std::optional<Trial> find_trial(int64_t study_id, int64_t number) override;
  std::vector<Trial> running_trials(int64_t study_id) override;
  FinishedBatch finished_since(int64_t study_id, int64_t cursor) override;
  std::array<int64_t, 5> count_by_state(int64_t study_id) override;
  std::string describe() const override { return conn_->describe(); }

 private:
  template <class Begin, class F>
  auto retried(Begin&& begin, F&& body);  // begin() ... COMMIT, retried on SqlRetry
  template <class F>
  auto write(F&& body);  // BEGIN (write) ... COMMIT, retried on SqlRetry
  template <class F>
  auto read(F&& body);  // BEGIN (snapshot) ... COMMIT, retried on SqlRetry
  // A writer creates the tables that are missing; both check the schema's version.
  void open_schema();
  // Stores (or replaces) one reported value of a trial: kind kStep or kFold, key step or fold.
  void put_value(int64_t trial_id, int64_t kind, int64_t key, double value);
  // Trials selected by `where` (SQL over table t, parameters $1...), with their reported values.
  std::vector<Trial> load_trials(const std::string& where, const std::vector<SqlValue>& params,
                                 const std::string& order);
  int64_t next_finish_seq(int64_t study_id);
  int64_t next_number(int64_t study_id);
  // Within a write transaction: queue a retry of failed trial `id` if allowed.
  std::optional<int64_t> enqueue_retry_locked(int64_t trial_id, int max_retries);
  // Within a write transaction: refreshes the heartbeat of trial `id` if it is RUNNING (on
  // PostgreSQL this also locks its row until commit, so no stale check can fail it meanwhile);
  // else throws TrialNotRunning saying that `discarded` was.
  void claim_running(int64_t trial_id, const std::string& discarded);
  // Within a write transaction: the TrialNotRunning for a write to trial `id` that was refused.
  [[noreturn]] void refuse(int64_t trial_id, const std::string& discarded);

  std::unique_ptr<SqlConnection> conn_;
  bool postgres_;
  StorageAccess access_;
  bool has_attrs_ = true;  // the trial_attrs table exists (a reader of an older file: maybe not)
  std::mutex mutex_;  // one connection, used by a worker's main and heartbeat threads
};

}  // namespace ftune::hpo
