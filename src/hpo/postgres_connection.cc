// PostgreSQL connection: connect, prepare, bind as text with explicit types, read typed cells, and
// map serialization failures / deadlocks / lock timeouts to SqlRetry.
#include "hpo/postgres_connection.h"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <cstring>
#include <memory>

namespace ftune::hpo {

namespace {

// Type OIDs from PostgreSQL's pg_type.dat (stable across versions).
constexpr Oid kInt2 = 21, kInt4 = 23, kInt8 = 20, kFloat4 = 700, kFloat8 = 701, kNumeric = 1700,
              kText = 25;

std::string double_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);  // shortest text that reads back to the same double
}

void ignore_notice(void*, const char*) {}  // "relation already exists, skipping" and the like

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

}  // namespace

std::string redact_password(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t at = url.find('@', scheme + 3);
  if (at == std::string::npos) return url;
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

PostgresConnection::PostgresConnection(const std::string& url) : shown_url_(redact_password(url)) {
  conn_ = PQconnectdb(url.c_str());
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
    std::string msg = conn_ ? PQerrorMessage(conn_) : "out of memory";
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    PQfinish(conn_);
    conn_ = nullptr;
    throw InputError(
        fmt::format("cannot connect to PostgreSQL study storage '{}': {}", shown_url_, msg));
  }
  PQsetNoticeProcessor(conn_, ignore_notice, nullptr);
}

PostgresConnection::~PostgresConnection() {
  if (conn_) PQfinish(conn_);
}

std::vector<SqlRow> PostgresConnection::exec(const std::string& sql,
                                             const std::vector<SqlValue>& params) {
  std::vector<std::string> text(params.size());
  std::vector<const char*> values(params.size(), nullptr);
  std::vector<Oid> types(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    const SqlValue& v = params[i];
    if (auto p = std::get_if<int64_t>(&v))
      text[i] = std::to_string(*p), types[i] = kInt8;
    else if (auto p = std::get_if<double>(&v))
      text[i] = double_text(*p), types[i] = kFloat8;
    else if (auto p = std::get_if<std::string>(&v))
      text[i] = *p, types[i] = kText;
    else
      continue;  // NULL
    values[i] = text[i].c_str();
  }
  auto it = prepared_.find(sql);
  if (it == prepared_.end()) {
    const std::string name = fmt::format("ftune_{}", prepared_.size());
    Result r(
        PQprepare(conn_, name.c_str(), sql.c_str(), static_cast<int>(params.size()), types.data()),
        PQclear);
    if (!r || PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
      const std::string msg = fmt::format("PostgreSQL '{}': prepare \"{}\": {}", shown_url_, sql,
                                          PQerrorMessage(conn_));
      if (state && (!std::strcmp(state, "40001") || !std::strcmp(state, "40P01")))
        throw SqlRetry(msg);
      throw Error(msg);
    }
    it = prepared_.emplace(sql, name).first;
  }
  Result r(PQexecPrepared(conn_, it->second.c_str(), static_cast<int>(params.size()), values.data(),
                          nullptr, nullptr, 0),
           PQclear);
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
    std::string msg = PQerrorMessage(conn_);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    msg = fmt::format("PostgreSQL '{}': \"{}\": {}", shown_url_, sql, msg);
    // serialization_failure, deadlock_detected, lock_not_available: roll back and try again.
    if (state && (!std::strcmp(state, "40001") || !std::strcmp(state, "40P01") ||
                  !std::strcmp(state, "55P03")))
      throw SqlRetry(msg);
    throw Error(msg);
  }
  std::vector<SqlRow> rows;
  if (st != PGRES_TUPLES_OK) return rows;
  const int n = PQntuples(r.get()), m = PQnfields(r.get());
  rows.resize(n);
  for (int i = 0; i < n; ++i) {
    rows[i].cells.resize(m);
    for (int c = 0; c < m; ++c) {
      if (PQgetisnull(r.get(), i, c)) continue;
      const char* t = PQgetvalue(r.get(), i, c);
      switch (PQftype(r.get(), c)) {
        case kInt2:
        case kInt4:
        case kInt8:
          rows[i].cells[c] = int64_t{std::stoll(t)};
          break;
        case kFloat4:
        case kFloat8:
        case kNumeric:
          rows[i].cells[c] = std::strtod(t, nullptr);
          break;
        default:
          rows[i].cells[c] = std::string(t, PQgetlength(r.get(), i, c));
      }
    }
  }
  return rows;
}

void PostgresConnection::begin_write() {
  exec("BEGIN", {});
  in_transaction_ = true;
}

void PostgresConnection::begin_read() {
  exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", {});
  in_transaction_ = true;
}

void PostgresConnection::commit() {
  exec("COMMIT", {});
  in_transaction_ = false;
}

void PostgresConnection::rollback() noexcept {
  if (!conn_ || PQtransactionStatus(conn_) == PQTRANS_IDLE) return;
  PGresult* r = PQexec(conn_, "ROLLBACK");
  PQclear(r);
  in_transaction_ = false;
}

void PostgresConnection::lock_study(int64_t study_id) {
  exec("SELECT id FROM studies WHERE id = $1 FOR UPDATE", {study_id});
}

}  // namespace ftune::hpo
