// Study storage over SQL: the reads (see sql_storage.cc for the transactions' rules). Each read
// runs in one snapshot transaction, retried while the database is busy.
#include <map>

#include "hpo/sql_storage_internal.h"
#include "hpo/trial_json.h"

namespace ftune::hpo {

using sql_detail::kFold;
using sql_detail::kTrialColumns;
using sql_detail::study_from_row;

std::optional<StudyInfo> SqlStorage::find_study(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto rows = read([&] {
    return conn_->exec("SELECT id, name, direction, space FROM studies WHERE name = $1", {name});
  });
  if (rows.empty()) return std::nullopt;
  return study_from_row(rows[0], conn_->describe());
}

std::vector<StudyInfo> SqlStorage::studies() {
  std::lock_guard lock(mutex_);
  auto rows = read([&] {
    return conn_->exec("SELECT id, name, direction, space FROM studies ORDER BY id", {});
  });
  std::vector<StudyInfo> out;
  for (const auto& r : rows) out.push_back(study_from_row(r, conn_->describe()));
  return out;
}

std::vector<Trial> SqlStorage::load_trials(const std::string& where,
                                           const std::vector<SqlValue>& params,
                                           const std::string& order) {
  auto rows = conn_->exec(
      fmt::format("SELECT {} FROM trials t WHERE {} ORDER BY {}", kTrialColumns, where, order),
      params);
  std::vector<Trial> out;
  out.reserve(rows.size());
  std::map<int64_t, size_t> index;
  for (const auto& r : rows) {
    Trial t;
    t.id = r.get_int(0);
    t.number = r.get_int(1);
    t.state = parse_trial_state(r.get_text(2));
    params_from_json(nlohmann::json::parse(r.get_text(3)), conn_->describe(), t.params,
                     t.distributions);
    if (!r.is_null(4)) t.value = r.get_double(4);
    t.error = r.get_text(5);
    t.retry_of = r.get_int(6);
    t.start_time = r.is_null(7) ? 0 : r.get_double(7);
    t.end_time = r.is_null(8) ? 0 : r.get_double(8);
    index[t.id] = out.size();
    out.push_back(std::move(t));
  }
  if (out.empty()) return out;
  auto values = conn_->exec(
      fmt::format("SELECT v.trial_id, v.kind, v.key, v.value FROM trial_values v JOIN trials t "
                  "ON t.id = v.trial_id WHERE {}",
                  where),
      params);
  for (const auto& r : values) {
    auto it = index.find(r.get_int(0));
    if (it == index.end()) continue;
    Trial& t = out[it->second];
    (r.get_int(1) == kFold ? t.fold_values : t.intermediate)[r.get_int(2)] = r.get_double(3);
  }
  if (!has_attrs_) return out;
  auto attrs =
      conn_->exec(fmt::format("SELECT a.trial_id, a.key, a.value FROM trial_attrs a JOIN trials t "
                              "ON t.id = a.trial_id WHERE {}",
                              where),
                  params);
  for (const auto& r : attrs) {
    auto it = index.find(r.get_int(0));
    if (it == index.end()) continue;
    const std::string text = r.get_text(2);
    nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    if (value.is_discarded())
      throw InputError(fmt::format("{}: trial id {}: attribute '{}' is not JSON: {}",
                                   conn_->describe(), r.get_int(0), r.get_text(1), text));
    out[it->second].attrs[r.get_text(1)] = std::move(value);
  }
  return out;
}

std::vector<Trial> SqlStorage::trials(int64_t study_id) {
  std::lock_guard lock(mutex_);
  return read([&] { return load_trials("t.study_id = $1", {study_id}, "t.number"); });
}

std::optional<Trial> SqlStorage::trial(int64_t trial_id) {
  std::lock_guard lock(mutex_);
  auto t = read([&] { return load_trials("t.id = $1", {trial_id}, "t.id"); });
  if (t.empty()) return std::nullopt;
  return t[0];
}

std::optional<Trial> SqlStorage::find_trial(int64_t study_id, int64_t number) {
  std::lock_guard lock(mutex_);
  auto t = read([&] {
    return load_trials("t.study_id = $1 AND t.number = $2", {study_id, number}, "t.id");
  });
  if (t.empty()) return std::nullopt;
  return t[0];
}

std::vector<Trial> SqlStorage::running_trials(int64_t study_id) {
  std::lock_guard lock(mutex_);
  return read([&] {
    return load_trials("t.study_id = $1 AND t.state = 'RUNNING'", {study_id}, "t.number");
  });
}

FinishedBatch SqlStorage::finished_since(int64_t study_id, int64_t cursor) {
  std::lock_guard lock(mutex_);
  FinishedBatch b;
  b.trials = read([&] {
    return load_trials("t.study_id = $1 AND t.finish_seq > $2", {study_id, cursor}, "t.finish_seq");
  });
  b.cursor = cursor;
  if (!b.trials.empty()) {
    // The cursor is the largest finish_seq returned; fetch it with the trials' own order.
    auto rows = read([&] {
      return conn_->exec("SELECT finish_seq FROM trials WHERE id = $1", {b.trials.back().id});
    });
    b.cursor = rows.at(0).get_int(0);
  }
  return b;
}

std::array<int64_t, 5> SqlStorage::count_by_state(int64_t study_id) {
  std::lock_guard lock(mutex_);
  auto rows = read([&] {
    return conn_->exec("SELECT state, COUNT(*) FROM trials WHERE study_id = $1 GROUP BY state",
                       {study_id});
  });
  std::array<int64_t, 5> counts{};
  for (const auto& r : rows)
    counts[static_cast<int>(parse_trial_state(r.get_text(0)))] = r.get_int(1);
  return counts;
}

}  // namespace ftune::hpo
