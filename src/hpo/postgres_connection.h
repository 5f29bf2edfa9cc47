// PostgreSQL connection (libpq) for study storage shared by workers on many machines: statements
// prepared once per connection, typed parameters sent as text, row locks for the counters that
// must never hand out a value twice, and the server's clock for heartbeats so that workers with
// skewed clocks agree on which trial is stale.
#pragma once

#include <string>
#include <unordered_map>

#include "hpo/sql_connection.h"

struct pg_conn;

namespace ftune::hpo {

class PostgresConnection : public SqlConnection {
 public:
  // `url` is a libpq URI (postgresql://user[:password]@host[:port]/db[?options]); InputError
  // naming it (without the password) when the server cannot be reached.
  explicit PostgresConnection(const std::string& url);
  ~PostgresConnection() override;

  std::vector<SqlRow> exec(const std::string& sql, const std::vector<SqlValue>& params) override;
  void begin_write() override;
  void begin_read() override;
  void commit() override;
  void rollback() noexcept override;
  void lock_study(int64_t study_id) override;
  const char* now_sql() const override { return "extract(epoch from clock_timestamp())::float8"; }
  std::string describe() const override { return shown_url_; }

 private:
  std::string shown_url_;
  pg_conn* conn_ = nullptr;
  std::unordered_map<std::string, std::string> prepared_;  // SQL -> statement name
  bool in_transaction_ = false;
};

// The URL with any password replaced by "***", for messages and logs.
std::string redact_password(const std::string& url);

}  // namespace ftune::hpo
