// A study as the study views read it: its definition, search space and every trial, loaded
// through hpo's storage readers (SQLite file or PostgreSQL; open_storage(url, existing = true):
// a storage that does not exist is an error, never created). Nothing is written.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hpo/search_space.h"
#include "hpo/storage.h"

namespace ftune::report {

struct StudyData {
  std::string storage;  // the URL as described by the storage (no password)
  hpo::StudyInfo info;
  hpo::SearchSpace space;
  std::vector<hpo::Trial> trials;  // by number
  double read_time = 0;  // when it was read (seconds since the epoch): running trials' cost so far
};

// A parameter's value as written in a config ("3e-05", "32", "lora"); a number when the value is
// not in the study's space (a storage edited by hand), never an assertion.
std::string param_text(const StudyData& study, const std::string& name, double internal);

// Reads study `name` (empty: the storage's only study), opening the storage read-only. InputError
// naming the URL when the storage cannot be opened or read, and the studies it holds when `name`
// is not one of them; an error saying so when another process keeps the database locked for
// longer than `busy_wait_s` (the dashboard waits 1 s and reads again at its next refresh).
StudyData read_study(const std::string& url, const std::string& name, double busy_wait_s = 10.0);
// The names of the storage's studies (the dashboard's index), with the same errors.
std::vector<std::string> study_names(const std::string& url, double busy_wait_s = 10.0);
// The same through an open storage (the dashboard keeps one open between refreshes).
StudyData read_study(hpo::Storage& storage, const std::string& name);

}  // namespace ftune::report
