// Study storage over SQL. Every trial-creating or trial-finishing transaction first locks the
// study row (PostgreSQL; SQLite's BEGIN IMMEDIATE locks the whole file), then bumps a counter on
// it: trial numbers come from studies.next_number and the finish order from studies.finish_seq.
// Because the lock is held until commit, both counters commit in increasing order, so a reader
// that has seen finish_seq k has seen every trial that finished before it: "finished since k" is
// exact and each finished trial reaches each worker's sampler once.
//
// Every change of a trial's state is a compare-and-set (UPDATE ... WHERE state = 'RUNNING'
// RETURNING, its rows counted) in the transaction that also takes the finish number and queues a
// retry, and a worker's writes (params, reports) first claim their trial the same way: a late
// write to a trial that another worker failed as stale changes nothing and raises
// TrialNotRunning, which says when the trial failed and which trial retries it.
#include "hpo/sql_storage.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "hpo/sql_storage_internal.h"
#include "hpo/trial_json.h"

namespace ftune::hpo {

using sql_detail::kFold;
using sql_detail::kStep;
using sql_detail::now_s;
using sql_detail::study_from_row;

namespace {

constexpr const char* kSchemaVersion = "1";  // ftune_meta.schema_version of the tables below

// {id} is the auto-increment primary key, spelled per dialect.
constexpr const char* kSchema[] = {
    "CREATE TABLE IF NOT EXISTS studies ("
    " id {id}, name TEXT NOT NULL UNIQUE, direction TEXT NOT NULL, space TEXT NOT NULL,"
    " next_number BIGINT NOT NULL DEFAULT 0, finish_seq BIGINT NOT NULL DEFAULT 0,"
    " created DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS trials ("
    " id {id}, study_id BIGINT NOT NULL REFERENCES studies(id), number BIGINT NOT NULL,"
    " state TEXT NOT NULL, params TEXT NOT NULL, value DOUBLE PRECISION,"
    " error TEXT NOT NULL DEFAULT '', retry_of BIGINT NOT NULL DEFAULT -1,"
    " attempt BIGINT NOT NULL DEFAULT 0, retried BIGINT NOT NULL DEFAULT 0,"
    " start_time DOUBLE PRECISION, end_time DOUBLE PRECISION, heartbeat DOUBLE PRECISION,"
    " finish_seq BIGINT, UNIQUE (study_id, number))",
    "CREATE INDEX IF NOT EXISTS trials_by_state ON trials (study_id, state)",
    "CREATE INDEX IF NOT EXISTS trials_by_finish ON trials (study_id, finish_seq)",
    "CREATE TABLE IF NOT EXISTS trial_values ("
    " trial_id BIGINT NOT NULL REFERENCES trials(id), kind BIGINT NOT NULL, key BIGINT NOT NULL,"
    " value DOUBLE PRECISION, PRIMARY KEY (trial_id, kind, key))",
    // Added after schema version 1 was released: CREATE IF NOT EXISTS adds it to older files,
    // and an older ftune ignores it, so the version stays.
    "CREATE TABLE IF NOT EXISTS trial_attrs ("
    " trial_id BIGINT NOT NULL REFERENCES trials(id), key TEXT NOT NULL, value TEXT NOT NULL,"
    " PRIMARY KEY (trial_id, key))",
};

// What differs between two JSON documents, for "created with a different space" errors.
std::string describe_difference(const nlohmann::json& stored, const nlohmann::json& wanted) {
  const nlohmann::json patch = nlohmann::json::diff(stored, wanted);
  if (patch.empty()) return "";
  const nlohmann::json& op = patch.front();
  const std::string path = op.value("path", "");
  const nlohmann::json::json_pointer ptr(path);
  const std::string was = stored.contains(ptr) ? stored.at(ptr).dump() : "(absent)";
  const std::string now = wanted.contains(ptr) ? wanted.at(ptr).dump() : "(absent)";
  return fmt::format("at {}: stored {}, this config {}", path.empty() ? "/" : path, was, now);
}

}  // namespace

const char* direction_name(Direction d) {
  return d == Direction::Minimize ? "minimize" : "maximize";
}

Direction parse_direction_name(const std::string& s, const std::string& where) {
  if (s == "minimize") return Direction::Minimize;
  if (s == "maximize") return Direction::Maximize;
  throw InputError(
      fmt::format("{}: direction must be 'minimize' or 'maximize', got '{}'", where, s));
}

TrialState parse_trial_state(const std::string& s) {
  for (TrialState t : {TrialState::Waiting, TrialState::Running, TrialState::Complete,
                       TrialState::Pruned, TrialState::Failed})
    if (s == to_string(t)) return t;
  throw InternalError(fmt::format("unknown trial state '{}' in study storage", s));
}

SqlStorage::SqlStorage(std::unique_ptr<SqlConnection> conn, bool postgres, StorageAccess access)
    : conn_(std::move(conn)), postgres_(postgres), access_(access) {
  open_schema();
}

void SqlStorage::open_schema() {
  std::lock_guard lock(mutex_);
  const bool reader = access_.read_only;
  auto check_or_create = [&] {
    // Two workers creating the schema at once would race on PostgreSQL's catalog.
    if (postgres_ && !reader) conn_->exec("SELECT pg_advisory_xact_lock(7466756)", {});
    // A database with a `studies` table but no ftune_meta belongs to another program (Optuna's
    // RDB storage has one): refuse it rather than fail later on a missing column.
    const char* tables =
        postgres_ ? "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                    "current_schema() AND table_name IN ('studies', 'ftune_meta', 'trial_attrs')"
                  : "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                    "('studies', 'ftune_meta', 'trial_attrs')";
    std::set<std::string> found;
    for (const auto& r : conn_->exec(tables, {})) found.insert(r.get_text(0));
    if (found.count("studies") && !found.count("ftune_meta"))
      throw InputError(
          fmt::format("{} is not an ftune study storage (it has a 'studies' table "
                      "of another program, e.g. Optuna); use another database",
                      conn_->describe()));
    if (reader && !found.count("ftune_meta"))
      throw InputError(fmt::format("{} holds no ftune study (no ftune tables); check the URL",
                                   conn_->describe()));
    if (!reader) {
      conn_->exec(
          "CREATE TABLE IF NOT EXISTS ftune_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)", {});
      conn_->exec(
          "INSERT INTO ftune_meta (key, value) VALUES ('schema_version', $1) "
          "ON CONFLICT (key) DO NOTHING",
          {std::string(kSchemaVersion)});
    }
    const std::string version =
        conn_->exec("SELECT value FROM ftune_meta WHERE key = 'schema_version'", {})
            .at(0)
            .get_text(0);
    if (version != kSchemaVersion)
      throw InputError(
          fmt::format("{} holds ftune study schema version {}; this ftune reads "
                      "version {}",
                      conn_->describe(), version, kSchemaVersion));
    // A reader takes an older file as it is: one written before trial attributes has none.
    has_attrs_ = !reader || found.count("trial_attrs") > 0;
    if (reader) return 0;
    for (const char* stmt : kSchema) {
      std::string sql = stmt;
      const size_t at = sql.find("{id}");
      if (at != std::string::npos)
        sql.replace(at, 4, postgres_ ? "BIGSERIAL PRIMARY KEY" : "INTEGER PRIMARY KEY");
      conn_->exec(sql, {});
    }
    return 0;
  };
  if (reader)
    read(check_or_create);
  else
    write(check_or_create);
}

StudyInfo SqlStorage::create_or_load_study(const std::string& name, Direction direction,
                                           const nlohmann::json& space) {
  std::lock_guard lock(mutex_);
  const std::string where = fmt::format("{} study '{}'", conn_->describe(), name);
  StudyInfo s = write([&] {
    conn_->exec(fmt::format("INSERT INTO studies (name, direction, space, created) VALUES "
                            "($1, $2, $3, {}) ON CONFLICT (name) DO NOTHING",
                            conn_->now_sql()),
                {name, std::string(direction_name(direction)), space.dump()});
    auto rows =
        conn_->exec("SELECT id, name, direction, space FROM studies WHERE name = $1", {name});
    return study_from_row(rows.at(0), where);
  });
  if (s.direction != direction)
    throw InputError(fmt::format("{} was created to {}, this config asks to {}", where,
                                 direction_name(s.direction), direction_name(direction)));
  if (s.space != space)
    throw InputError(fmt::format(
        "{} was created with a different search space ({}); use another study name or storage",
        where, describe_difference(s.space, space)));
  return s;
}

int64_t SqlStorage::next_finish_seq(int64_t study_id) {
  return conn_
      ->exec("UPDATE studies SET finish_seq = finish_seq + 1 WHERE id = $1 RETURNING finish_seq",
             {study_id})
      .at(0)
      .get_int(0);
}

int64_t SqlStorage::next_number(int64_t study_id) {
  return conn_
      ->exec(
          "UPDATE studies SET next_number = next_number + 1 WHERE id = $1 RETURNING next_number - "
          "1",
          {study_id})
      .at(0)
      .get_int(0);
}

std::optional<Trial> SqlStorage::start_trial(int64_t study_id, int64_t max_trials) {
  std::lock_guard lock(mutex_);
  auto id = write([&]() -> std::optional<int64_t> {
    conn_->lock_study(study_id);
    auto waiting = conn_->exec(
        "SELECT id FROM trials WHERE study_id = $1 AND state = 'WAITING' ORDER BY number LIMIT 1",
        {study_id});
    if (!waiting.empty()) {
      const int64_t id = waiting[0].get_int(0);
      const bool claimed =
          !conn_
               ->exec(fmt::format("UPDATE trials SET state = 'RUNNING', start_time "
                                  "= {0}, heartbeat = {0} WHERE id = $1 AND "
                                  "state = 'WAITING' RETURNING id",
                                  conn_->now_sql()),
                      {id})
               .empty();
      FTUNE_ASSERT(claimed, "queued trial id {} was claimed under the study lock by another", id);
      return id;
    }
    if (max_trials >= 0) {
      const int64_t counted =
          conn_->exec("SELECT COUNT(*) FROM trials WHERE study_id = $1 AND retried = 0", {study_id})
              .at(0)
              .get_int(0);
      if (counted >= max_trials) return std::nullopt;
    }
    const int64_t number = next_number(study_id);
    return conn_
        ->exec(fmt::format("INSERT INTO trials (study_id, number, state, params, start_time, "
                           "heartbeat) VALUES ($1, $2, 'RUNNING', $3, {0}, {0}) RETURNING id",
                           conn_->now_sql()),
               {study_id, number, params_to_json({}, {}).dump()})
        .at(0)
        .get_int(0);
  });
  if (!id) return std::nullopt;
  auto t = read([&] { return load_trials("t.id = $1", {*id}, "t.id"); });
  return t.at(0);
}

void SqlStorage::claim_running(int64_t trial_id, const std::string& discarded) {
  if (conn_
          ->exec(fmt::format("UPDATE trials SET heartbeat = {} WHERE id = $1 AND state = "
                             "'RUNNING' RETURNING id",
                             conn_->now_sql()),
                 {trial_id})
          .empty())
    refuse(trial_id, discarded);
}

void SqlStorage::refuse(int64_t trial_id, const std::string& discarded) {
  auto rows = conn_->exec(
      "SELECT study_id, number, state, end_time, error FROM trials WHERE id = $1", {trial_id});
  if (rows.empty())
    throw InternalError(fmt::format("{}: no trial with id {}; {} was not stored", conn_->describe(),
                                    trial_id, discarded));
  const SqlRow& r = rows[0];
  const int64_t number = r.get_int(1);
  auto retry = conn_->exec(
      "SELECT number FROM trials WHERE study_id = $1 AND retry_of = $2 ORDER BY number LIMIT 1",
      {r.get_int(0), number});
  throw TrialNotRunning(
      number, parse_trial_state(r.get_text(2)), r.is_null(3) ? 0 : r.get_double(3), r.get_text(4),
      retry.empty() ? std::nullopt : std::optional<int64_t>(retry[0].get_int(0)), discarded);
}

void SqlStorage::set_params(int64_t trial_id, const Params& params,
                            const std::map<std::string, Distribution>& distributions) {
  std::lock_guard lock(mutex_);
  write([&] {
    // One statement: a second UPDATE of the row in this transaction would make PostgreSQL check
    // the study foreign key (a share lock on the study row, which a stale check may hold while
    // it waits for this trial's row: a deadlock).
    if (conn_
            ->exec(fmt::format("UPDATE trials SET params = $2, heartbeat = {} WHERE id = $1 AND "
                               "state = 'RUNNING' RETURNING id",
                               conn_->now_sql()),
                   {trial_id, params_to_json(params, distributions).dump()})
            .empty())
      refuse(trial_id, "its sampled params");
    return 0;
  });
}

void SqlStorage::put_value(int64_t trial_id, int64_t kind, int64_t key, double value) {
  std::lock_guard lock(mutex_);
  write([&] {
    claim_running(trial_id, fmt::format("its report of {} {} (value {})",
                                        kind == kFold ? "fold" : "step", key, value));
    conn_->exec(
        "INSERT INTO trial_values (trial_id, kind, key, value) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (trial_id, kind, key) DO UPDATE SET value = excluded.value",
        {trial_id, kind, key, value});
    return 0;
  });
}

void SqlStorage::set_attr(int64_t trial_id, const std::string& key, const nlohmann::json& value) {
  std::lock_guard lock(mutex_);
  write([&] {
    claim_running(trial_id, fmt::format("its attribute {} = {}", key, value.dump()));
    conn_->exec(
        "INSERT INTO trial_attrs (trial_id, key, value) VALUES ($1, $2, $3) "
        "ON CONFLICT (trial_id, key) DO UPDATE SET value = excluded.value",
        {trial_id, key, value.dump()});
    return 0;
  });
}

void SqlStorage::report_intermediate(int64_t trial_id, int64_t step, double value) {
  put_value(trial_id, kStep, step, value);
}

void SqlStorage::report_fold(int64_t trial_id, int64_t fold, double value) {
  put_value(trial_id, kFold, fold, value);
}

bool SqlStorage::heartbeat(int64_t trial_id) {
  std::lock_guard lock(mutex_);
  return write([&] {
    return !conn_
                ->exec(fmt::format("UPDATE trials SET heartbeat = {} WHERE id = $1 AND state = "
                                   "'RUNNING' RETURNING id",
                                   conn_->now_sql()),
                       {trial_id})
                .empty();
  });
}

void SqlStorage::finish(int64_t trial_id, TrialState state, std::optional<double> value,
                        const std::string& error) {
  FTUNE_ASSERT(
      state == TrialState::Complete || state == TrialState::Pruned || state == TrialState::Failed,
      "finish() needs a final state, got {}", to_string(state));
  FTUNE_ASSERT(state != TrialState::Complete || (value && !std::isnan(*value)),
               "a complete trial needs a value");
  std::lock_guard lock(mutex_);
  const std::string discarded = fmt::format("its result ({}{})", to_string(state),
                                            value           ? fmt::format(", value {}", *value)
                                            : error.empty() ? std::string()
                                                            : ": " + error);
  write([&] {
    auto rows = conn_->exec("SELECT study_id FROM trials WHERE id = $1", {trial_id});
    if (rows.empty()) refuse(trial_id, discarded);
    const int64_t study_id = rows[0].get_int(0);
    conn_->lock_study(study_id);
    const int64_t seq = next_finish_seq(study_id);  // rolled back with a refusal
    SqlValue v = value ? SqlValue(*value) : SqlValue();
    // Compare-and-set: only a RUNNING trial ends here.
    if (conn_
            ->exec(fmt::format("UPDATE trials SET state = $2, value = $3, error = $4, end_time = "
                               "{}, finish_seq = $5 WHERE id = $1 AND state = 'RUNNING' "
                               "RETURNING id",
                               conn_->now_sql()),
                   {trial_id, std::string(to_string(state)), v, error, seq})
            .empty())
      refuse(trial_id, discarded);
    return 0;
  });
}

std::optional<int64_t> SqlStorage::enqueue_retry_locked(int64_t trial_id, int max_retries) {
  // Compare-and-set on `retried`: a failed trial is retried once at most.
  auto rows = conn_->exec(
      "UPDATE trials SET retried = 1 WHERE id = $1 AND state = 'FAIL' AND retried = 0 AND "
      "attempt < $2 RETURNING study_id, number, params, attempt",
      {trial_id, static_cast<int64_t>(max_retries)});
  if (rows.empty()) return std::nullopt;
  const SqlRow& r = rows[0];
  const int64_t study_id = r.get_int(0);
  const int64_t number = next_number(study_id);
  conn_->exec(
      "INSERT INTO trials (study_id, number, state, params, retry_of, attempt) VALUES "
      "($1, $2, 'WAITING', $3, $4, $5)",
      {study_id, number, r.get_text(2), r.get_int(1), r.get_int(3) + 1});
  return number;
}

std::optional<int64_t> SqlStorage::enqueue_retry(int64_t trial_id, int max_retries) {
  std::lock_guard lock(mutex_);
  return write([&]() -> std::optional<int64_t> {
    auto rows = conn_->exec("SELECT study_id FROM trials WHERE id = $1", {trial_id});
    if (rows.empty()) return std::nullopt;
    conn_->lock_study(rows[0].get_int(0));
    return enqueue_retry_locked(trial_id, max_retries);
  });
}

int SqlStorage::fail_stale(int64_t study_id, double grace_s, int max_retries) {
  std::lock_guard lock(mutex_);
  const std::string stale =
      fmt::format("study_id = $1 AND state = 'RUNNING' AND heartbeat < {} - $2", conn_->now_sql());
  // A cheap read first: the write lock is taken only when there is something to fail.
  const int64_t candidates = read([&] {
    return conn_->exec("SELECT COUNT(*) FROM trials WHERE " + stale, {study_id, grace_s})
        .at(0)
        .get_int(0);
  });
  if (candidates == 0) return 0;
  return write([&] {
    conn_->lock_study(study_id);
    auto rows = conn_->exec("SELECT id, number FROM trials WHERE " + stale + " ORDER BY number",
                            {study_id, grace_s});
    int failed = 0;
    for (const auto& r : rows) {
      // Compare-and-set, the staleness checked again: on PostgreSQL a heartbeat or report of
      // the trial's worker may have committed since the SELECT (it does not take the study lock).
      if (conn_
              ->exec(fmt::format("UPDATE trials SET state = 'FAIL', error = $2, end_time = {0} "
                                 "WHERE id = $1 AND state = 'RUNNING' AND heartbeat < {0} - $3 "
                                 "RETURNING id",
                                 conn_->now_sql()),
                     {r.get_int(0),
                      fmt::format("no heartbeat for more than {} s (its worker died or hung)",
                                  grace_s),
                      grace_s})
              .empty())
        continue;
      ++failed;
      conn_->exec("UPDATE trials SET finish_seq = $2 WHERE id = $1",
                  {r.get_int(0), next_finish_seq(study_id)});
      auto retry = enqueue_retry_locked(r.get_int(0), max_retries);
      spdlog::warn(
          "trial {} lost its worker (no heartbeat for {} s): failed{}; a late result of it will be "
          "discarded",
          r.get_int(1), grace_s, retry ? fmt::format(", retried as trial {}", *retry) : "");
    }
    return failed;
  });
}

}  // namespace ftune::hpo
