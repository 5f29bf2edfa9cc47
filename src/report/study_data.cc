// Loading a study for the study views (study_data.h).
#include "report/study_data.h"

#include <fmt/format.h>

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace ftune::report {

std::string param_text(const StudyData& study, const std::string& name, double internal) {
  const hpo::ParamSpec* p = study.space.find(name);
  if (p && p->dist.kind == hpo::Distribution::Kind::Categorical &&
      !(internal >= 0 && internal < static_cast<double>(p->dist.choices.size())))
    p = nullptr;
  return p ? study.space.external(name, internal) : fmt::format("{}", internal);
}

StudyData read_study(hpo::Storage& storage, const std::string& name) {
  std::optional<hpo::StudyInfo> info;
  if (name.empty()) {
    const std::vector<hpo::StudyInfo> all = storage.studies();
    if (all.size() != 1)
      throw InputError(fmt::format("{}: holds {} studies; name one with --study", storage.describe(),
                                   all.size()));
    info = all.front();
  } else {
    info = storage.find_study(name);
  }
  if (!info) {
    std::string names;
    for (const hpo::StudyInfo& s : storage.studies()) names += (names.empty() ? "" : ", ") + s.name;
    throw InputError(fmt::format("{}: no study named '{}' (studies: {})", storage.describe(), name,
                                 names.empty() ? "none" : names));
  }
  StudyData d;
  d.storage = storage.describe();
  d.info = *info;
  d.space = hpo::SearchSpace::from_json(info->space, d.storage + ": study " + info->name);
  d.trials = storage.trials(info->id);
  std::sort(d.trials.begin(), d.trials.end(),
            [](const hpo::Trial& a, const hpo::Trial& b) { return a.number < b.number; });
  return d;
}

namespace {

// The SQLite file of a sqlite URL ("" for other schemes).
std::string sqlite_path(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  if (url.compare(0, scheme, "sqlite") == 0 && url.compare(scheme, 4, ":///") == 0)
    return url.substr(scheme + 4);
  return "";
}

// A read-only look at an existing SQLite file before hpo's storage opens it: a file that another
// process holds under an exclusive lock (locking_mode=EXCLUSIVE, or a write transaction on a
// rollback-journal database) would make the storage wait, retrying, for minutes; here it is an
// error after 1 s, which the dashboard shows and retries at its next refresh. A file that is not
// a database is named as such.
void probe_sqlite(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return;  // the storage names it
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  }
  const std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  sqlite3_close_v2(db);
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
    throw InputError(fmt::format(
        "{}: the study database is locked by another process (an exclusive lock held for more "
        "than 1 s: {}); it is read again at the next refresh",
        path, message));
  if (rc != SQLITE_OK)
    throw InputError(fmt::format("{}: cannot read the study database: {}", path, message));
}

}  // namespace

StudyData read_study(const std::string& url, const std::string& name) {
  probe_sqlite(sqlite_path(url));
  const std::unique_ptr<hpo::Storage> storage = hpo::open_storage(url, /*existing=*/true);
  return read_study(*storage, name);
}

}  // namespace ftune::report

namespace ftune::report {

std::vector<std::string> study_names(const std::string& url) {
  probe_sqlite(sqlite_path(url));
  std::vector<std::string> names;
  for (const hpo::StudyInfo& s : hpo::open_storage(url, /*existing=*/true)->studies())
    names.push_back(s.name);
  return names;
}

}  // namespace ftune::report
