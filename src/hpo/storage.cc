// open_storage: picks the backend from the URL. SQLite URLs follow SQLAlchemy (as Optuna users
// write them): sqlite:///relative/path.db, sqlite:////absolute/path.db; a plain path is a SQLite
// file too. postgresql:// (or postgres://, postgresql+DRIVER://) goes to libpq unchanged.
#include "hpo/storage.h"

#include <fmt/format.h>

#include "core/error.h"
#include "hpo/postgres_connection.h"
#include "hpo/sql_storage.h"
#include "hpo/sqlite_connection.h"

namespace ftune::hpo {

std::unique_ptr<Storage> open_storage(const std::string& url) {
  if (url.empty())
    throw InputError(
        "storage URL is empty (expected sqlite:///FILE.db or "
        "postgresql://USER@HOST:PORT/DB)");
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos)
    return std::make_unique<SqlStorage>(std::make_unique<SqliteConnection>(url), false);
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
        std::make_unique<SqliteConnection>(url.substr(scheme_end + 4)), false);
  }
  if (scheme == "postgresql" || scheme == "postgres") {
    const std::string libpq_url = "postgresql" + url.substr(scheme_end);
    return std::make_unique<SqlStorage>(std::make_unique<PostgresConnection>(libpq_url), true);
  }
  throw InputError(
      fmt::format("storage URL '{}': unsupported scheme '{}' (expected sqlite:// or postgresql://)",
                  redact_password(url), scheme));
}

}  // namespace ftune::hpo
