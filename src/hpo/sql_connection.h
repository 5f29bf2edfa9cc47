// A minimal SQL connection shared by the study storages: statements with typed parameters ($1, $2,
// ... in PostgreSQL's style; the SQLite connection rewrites them), rows of typed values, and
// write transactions that the caller retries when the database says "try again" (SQLite busy,
// PostgreSQL serialization failure or deadlock). SQLite and PostgreSQL implement it; the SQL that
// the storage runs is the common subset of both dialects.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"

namespace ftune::hpo {

// NULL, integer, real or text, as bound and as read back.
using SqlValue = std::variant<std::monostate, int64_t, double, std::string>;

struct SqlRow {
  std::vector<SqlValue> cells;

  bool is_null(size_t i) const { return std::holds_alternative<std::monostate>(cells.at(i)); }
  int64_t get_int(size_t i) const;
  double get_double(size_t i) const;  // NULL reads as NaN (SQLite stores NaN as NULL)
  std::string get_text(size_t i) const;
};

// The database refused for now (locked, busy, serialization failure): roll back and retry.
class SqlRetry : public Error {
 public:
  using Error::Error;
};

class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  // Runs one statement; returns its rows (none for statements without a result).
  virtual std::vector<SqlRow> exec(const std::string& sql,
                                   const std::vector<SqlValue>& params = {}) = 0;
  // Starts a transaction that will write (SQLite: BEGIN IMMEDIATE takes the write lock now, so
  // the transaction can never fail half-way on a lock upgrade).
  virtual void begin_write() = 0;
  // Starts a read-only transaction that sees one consistent snapshot.
  virtual void begin_read() = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  // Locks the study row against other writers until commit (PostgreSQL: SELECT ... FOR UPDATE;
  // SQLite: nothing, BEGIN IMMEDIATE already holds the database's only write lock).
  virtual void lock_study(int64_t study_id) = 0;
  // SQL for "seconds since the epoch, now" as the database's clock sees it.
  virtual const char* now_sql() const = 0;
  virtual std::string describe() const = 0;  // the URL without a password, for messages
};

}  // namespace ftune::hpo
