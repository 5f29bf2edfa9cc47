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

// A busy database is retried for this long before the operation gives up with an error that
// says so (with SQLite's busy timeout per statement on top, this is minutes of contention).
constexpr double kRetryDeadlineS = 300.0;

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

template <class F>
auto SqlStorage::write(F&& body) {
  const double start = sql_detail::now_s();
  std::mt19937_64 rng(std::random_device{}());
  double backoff = 0.002;
  for (int attempt = 0;; ++attempt) {
    try {
      conn_->begin_write();
      auto result = body();
      conn_->commit();
      return result;
    } catch (const SqlRetry& e) {
      conn_->rollback();
      if (sql_detail::now_s() - start > sql_detail::kRetryDeadlineS)
        throw Error(fmt::format("study storage busy for more than {} s: {}",
                                sql_detail::kRetryDeadlineS, e.what()));
      // Jittered exponential back-off so that waiting workers do not retry in lock step.
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff * jitter(rng)));
      backoff = std::min(backoff * 2, 0.2);
    } catch (...) {
      conn_->rollback();
      throw;
    }
  }
}

template <class F>
auto SqlStorage::read(F&& body) {
  const double start = sql_detail::now_s();
  for (;;) {
    try {
      conn_->begin_read();
      auto result = body();
      conn_->commit();
      return result;
    } catch (const SqlRetry& e) {
      conn_->rollback();
      if (sql_detail::now_s() - start > sql_detail::kRetryDeadlineS)
        throw Error(fmt::format("study storage busy for more than {} s: {}",
                                sql_detail::kRetryDeadlineS, e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } catch (...) {
      conn_->rollback();
      throw;
    }
  }
}

}  // namespace ftune::hpo
