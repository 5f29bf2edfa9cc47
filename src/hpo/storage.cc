// open_storage: picks the backend from the URL. SQLite URLs follow SQLAlchemy (as Optuna users
// write them): sqlite:///relative/path.db, sqlite:////absolute/path.db; a plain path is a SQLite
// file too. postgresql:// (or postgres://, postgresql+DRIVER://) goes to libpq unchanged. Also
// the message of TrialNotRunning.
#include "hpo/storage.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "core/error.h"
#include "hpo/postgres_connection.h"
#include "hpo/sql_storage.h"
#include "hpo/sqlite_connection.h"

namespace ftune::hpo {

namespace {

// "2026-11-23 03:12:27 UTC" for seconds since the epoch.
std::string utc_time(double seconds) {
  const std::time_t t = static_cast<std::time_t>(std::floor(seconds));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string fate(TrialState state, double end_time, const std::string& error,
                 std::optional<int64_t> retried_as) {
  const std::string at = end_time > 0 ? " at " + utc_time(end_time) : "";
  if (state == TrialState::Failed) {
    const bool stale = error.rfind("no heartbeat", 0) == 0;
    return fmt::format(
        "the trial was failed{}{} ({}) and {}", stale ? " as stale" : "", at,
        error.empty() ? "no reason given" : error,
        retried_as ? fmt::format("retried as trial {}", *retried_as) : std::string("not retried"));
  }
  if (state == TrialState::Waiting || state == TrialState::Running)
    return fmt::format("the trial is {}", to_string(state));
  return fmt::format("the trial had already ended {}{}", to_string(state), at);
}

}  // namespace

TrialNotRunning::TrialNotRunning(int64_t number, TrialState state, double end_time,
                                 std::string error, std::optional<int64_t> retried_as,
                                 const std::string& discarded)
    : Error(fmt::format("trial {}: {} was discarded: {}", number, discarded,
                        fate(state, end_time, error, retried_as))),
      number(number),
      state(state),
      end_time(end_time),
      error(std::move(error)),
      retried_as(retried_as) {}

std::unique_ptr<Storage> open_storage(const std::string& url, StorageAccess access) {
  if (url.empty())
    throw InputError(
        "storage URL is empty (expected sqlite:///FILE.db or "
        "postgresql://USER@HOST:PORT/DB)");
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos)
    return std::make_unique<SqlStorage>(std::make_unique<SqliteConnection>(url, access), false,
                                        access);
  std::string scheme = url.substr(0, scheme_end);
  const size_t plus = scheme.find('+');  // SQLAlchemy's postgresql+psycopg2://
  if (plus != std::string::npos) scheme = scheme.substr(0, plus);
  if (scheme == "sqlite") {
    if (url.compare(scheme_end, 4, ":///") != 0 || url.size() <= scheme_end + 4)
      throw InputError(
          fmt::format("storage URL '{}': expected sqlite:///FILE.db (relative) or "
                      "sqlite:////ABSOLUTE/FILE.db",
                      url));
    return std::make_unique<SqlStorage>(
        std::make_unique<SqliteConnection>(url.substr(scheme_end + 4), access), false, access);
  }
  if (scheme == "postgresql" || scheme == "postgres") {
    const std::string libpq_url = "postgresql" + url.substr(scheme_end);
    return std::make_unique<SqlStorage>(std::make_unique<PostgresConnection>(libpq_url), true,
                                        access);
  }
  throw InputError(
      fmt::format("storage URL '{}': unsupported scheme '{}' (expected sqlite:// or postgresql://)",
                  redact_password(url), scheme));
}

std::string storage_file(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;
  if (url.compare(0, scheme_end, "sqlite") == 0 && url.compare(scheme_end, 4, ":///") == 0)
    return url.substr(scheme_end + 4);
  return "";
}

}  // namespace ftune::hpo
