// SQLite connection for study storage on one machine: WAL journal (readers never block the
// writer), synchronous=NORMAL (a killed process loses nothing committed; only a power cut may lose
// the last transactions, never the file's integrity), a busy timeout so that a worker waits for a
// short write transaction of another instead of failing, and prepared statements cached per SQL.
#pragma once

#include <string>
#include <unordered_map>

#include "hpo/sql_connection.h"
#include "hpo/storage.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ftune::hpo {

class SqliteConnection : public SqlConnection {
 public:
  // Opens the database file, a writer creating it (and switching it to WAL), a reader read-only;
  // InputError naming it when that fails or, for a reader, when the file does not exist. One
  // statement waits at most min(10 s, access.busy_wait_s) for another connection's lock.
  explicit SqliteConnection(const std::string& path, StorageAccess access = {});
  ~SqliteConnection() override;

  std::vector<SqlRow> exec(const std::string& sql, const std::vector<SqlValue>& params) override;
  void begin_write() override;
  void begin_read() override;
  void commit() override;
  void rollback() noexcept override;
  void lock_study(int64_t) override {}
  const char* now_sql() const override { return "((julianday('now') - 2440587.5) * 86400.0)"; }
  std::string describe() const override { return "sqlite:///" + path_; }

 private:
  sqlite3_stmt* prepare(const std::string& sql);
  [[noreturn]] void fail(int rc, const std::string& what);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace ftune::hpo
