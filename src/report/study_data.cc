// Loading a study for the study views (study_data.h).
#include "report/study_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

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
  d.read_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::sort(d.trials.begin(), d.trials.end(),
            [](const hpo::Trial& a, const hpo::Trial& b) { return a.number < b.number; });
  return d;
}

StudyData read_study(const std::string& url, const std::string& name, double busy_wait_s) {
  const std::unique_ptr<hpo::Storage> storage =
      hpo::open_storage(url, hpo::StorageAccess::reader(busy_wait_s));
  return read_study(*storage, name);
}

}  // namespace ftune::report

namespace ftune::report {

std::vector<std::string> study_names(const std::string& url, double busy_wait_s) {
  std::vector<std::string> names;
  for (const hpo::StudyInfo& s :
       hpo::open_storage(url, hpo::StorageAccess::reader(busy_wait_s))->studies())
    names.push_back(s.name);
  return names;
}

}  // namespace ftune::report
