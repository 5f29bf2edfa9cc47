// SQLite connection: opening with the pragmas that make several worker processes on one file
// safe, typed binding, and mapping of "busy"/"locked" to SqlRetry.
#include "hpo/sqlite_connection.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

namespace ftune::hpo {

namespace {

// How long one statement waits for another connection's write lock before reporting busy (the
// storage then rolls back and retries with back-off, so this is not a deadline for the user).
constexpr int kBusyTimeoutMs = 10000;
// How long a writer keeps asking for the WAL journal while other connections hold the file.
constexpr int kWalSwitchDeadlineS = 60;

bool is_retry(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

// "$1" -> "?1": the storage writes PostgreSQL placeholders; "?NNN" binds by number in SQLite.
std::string rewrite_placeholders(const std::string& sql) {
  std::string out = sql;
  for (size_t i = 0; i + 1 < out.size(); ++i)
    if (out[i] == '$' && out[i + 1] >= '0' && out[i + 1] <= '9') out[i] = '?';
  return out;
}

}  // namespace

SqliteConnection::SqliteConnection(const std::string& path, StorageAccess access) : path_(path) {
  const bool create = !access.read_only;
  std::error_code ec;
  if (!create && !std::filesystem::exists(path, ec))
    throw InputError(fmt::format(
        "{}: no such study storage (the SQLite file does not exist; `ftune hpo run` creates it)",
        path));
  const int flags = access.read_only ? SQLITE_OPEN_READONLY
                                     : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw InputError(fmt::format("cannot open SQLite study storage '{}': {}", path, msg));
  }
  sqlite3_busy_timeout(
      db_, static_cast<int>(std::min<double>(kBusyTimeoutMs, access.busy_wait_s * 1000.0)));
  sqlite3_extended_result_codes(db_, 1);
  if (access.read_only) {
    // A reader keeps the journal mode the writers chose. A file that is not a database is named
    // now; a locked one is left to the storage's bounded retries.
    try {
      exec("SELECT count(*) FROM sqlite_master", {});
    } catch (const SqlRetry&) {
    } catch (const Error& e) {
      sqlite3_close_v2(db_);
      db_ = nullptr;
      throw InputError(fmt::format("cannot read '{}' as SQLite study storage: {}", path, e.what()));
    }
    return;
  }
  // journal_mode=WAL needs a moment of exclusive access the first time: when many workers open
  // a new file at once, a busy answer is retried for up to a minute (counting the busy timeout
  // each attempt waits) rather than shown.
  try {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      try {
        exec("PRAGMA journal_mode=WAL", {});
        break;
      } catch (const SqlRetry&) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(kWalSwitchDeadlineS))
          throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    exec("PRAGMA synchronous=NORMAL", {});
  } catch (const Error& e) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw InputError(fmt::format("cannot use '{}' as SQLite study storage: {}", path, e.what()));
  }
}

SqliteConnection::~SqliteConnection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  if (db_) sqlite3_close_v2(db_);
}

void SqliteConnection::fail(int rc, const std::string& what) {
  const std::string msg =
      fmt::format("SQLite '{}': {}: {}", path_, what, db_ ? sqlite3_errmsg(db_) : "");
  if (is_retry(rc)) throw SqlRetry(msg);
  throw Error(msg);
}

sqlite3_stmt* SqliteConnection::prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  const std::string text = rewrite_placeholders(sql);
  const int rc =
      sqlite3_prepare_v3(db_, text.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) fail(rc, "prepare \"" + sql + "\"");
  cache_.emplace(sql, stmt);
  return stmt;
}

std::vector<SqlRow> SqliteConnection::exec(const std::string& sql,
                                           const std::vector<SqlValue>& params) {
  sqlite3_stmt* stmt = prepare(sql);
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  for (size_t i = 0; i < params.size(); ++i) {
    const int k = static_cast<int>(i) + 1;
    const SqlValue& v = params[i];
    int rc = SQLITE_OK;
    if (auto p = std::get_if<int64_t>(&v))
      rc = sqlite3_bind_int64(stmt, k, *p);
    else if (auto p = std::get_if<double>(&v)) {
      // SQLite turns a bound NaN into NULL; read back as NaN by SqlRow::get_double.
      rc = std::isnan(*p) ? sqlite3_bind_null(stmt, k) : sqlite3_bind_double(stmt, k, *p);
    } else if (auto p = std::get_if<std::string>(&v))
      rc = sqlite3_bind_text(stmt, k, p->data(), static_cast<int>(p->size()), SQLITE_TRANSIENT);
    else
      rc = sqlite3_bind_null(stmt, k);
    if (rc != SQLITE_OK) fail(rc, "bind parameter");
  }
  std::vector<SqlRow> rows;
  for (;;) {
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      sqlite3_reset(stmt);
      fail(rc, "\"" + sql + "\"");
    }
    SqlRow row;
    const int n = sqlite3_column_count(stmt);
    row.cells.resize(n);
    for (int c = 0; c < n; ++c) {
      switch (sqlite3_column_type(stmt, c)) {
        case SQLITE_INTEGER:
          row.cells[c] = int64_t{sqlite3_column_int64(stmt, c)};
          break;
        case SQLITE_FLOAT:
          row.cells[c] = sqlite3_column_double(stmt, c);
          break;
        case SQLITE_NULL:
          break;
        default: {
          const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
          row.cells[c] = std::string(t ? t : "", sqlite3_column_bytes(stmt, c));
        }
      }
    }
    rows.push_back(std::move(row));
  }
  sqlite3_reset(stmt);
  return rows;
}

void SqliteConnection::begin_write() {
  exec("BEGIN IMMEDIATE", {});
}
void SqliteConnection::begin_read() {
  exec("BEGIN", {});
}
void SqliteConnection::commit() {
  exec("COMMIT", {});
}
void SqliteConnection::rollback() noexcept {
  if (db_ && !sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace ftune::hpo
