// What the study storage's two files share (sql_storage.cc: writes, sql_storage_reads.cc:
// reads): the retried transactions, the trial columns and row readers. Included by them alone.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "core/error.h"
#include "hpo/sql_storage.h"

namespace ftune::hpo {
namespace sql_detail {

constexpr int64_t kStep = 0, kFold = 1;  // trial_values.kind

inline constexpr const char* kTrialColumns =
    "t.id, t.number, t.state, t.params, t.value, t.error, t.retry_of, t.start_time, t.end_time";

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline StudyInfo study_from_row(const SqlRow& r, const std::string& where) {
  StudyInfo s;
  s.id = r.get_int(0);
  s.name = r.get_text(1);
  s.direction = parse_direction_name(r.get_text(2), where);
  s.space = nlohmann::json::parse(r.get_text(3));
  return s;
}

}  // namespace sql_detail

// One transaction opened by `begin` (a write or a snapshot read) around `body`, retried with
// jittered exponential back-off (so that waiting workers do not retry in lock step) while the
// database answers busy, for at most access_.busy_wait_s.
template <class Begin, class F>
auto SqlStorage::retried(Begin&& begin, F&& body) {
  const double start = sql_detail::now_s();
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  double backoff = 0.002;
  for (;;) {
    try {
      begin();
      auto result = body();
      conn_->commit();
      return result;
    } catch (const SqlRetry& e) {
      conn_->rollback();
      const double waited = sql_detail::now_s() - start;
      if (waited > access_.busy_wait_s)
        throw Error(fmt::format(
            "{}: the study database is locked by another process (busy for {:.0f} s, longer "
            "than the {:g} s this command waits): {}",
            conn_->describe(), waited, access_.busy_wait_s, e.what()));
      std::this_thread::sleep_for(std::chrono::duration<double>(
          std::min(backoff * jitter(rng), std::max(0.0, access_.busy_wait_s - waited))));
      backoff = std::min(backoff * 2, 0.2);
    } catch (...) {
      conn_->rollback();
      throw;
    }
  }
}

template <class F>
auto SqlStorage::write(F&& body) {
  if (access_.read_only)
    throw InternalError(fmt::format("a write to {}, opened read-only", conn_->describe()));
  return retried([&] { conn_->begin_write(); }, std::forward<F>(body));
}

template <class F>
auto SqlStorage::read(F&& body) {
  return retried([&] { conn_->begin_read(); }, std::forward<F>(body));
}

}  // namespace ftune::hpo
