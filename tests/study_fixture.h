// A small study written through ftune's own storage API into a SQLite file (the study views' and
// the dashboard's tests): 4 parameters (log float, float, categorical, int), complete trials with
// 3 intermediate reports and 3 fold values, pruned trials stopped after 1 or 2 reports, a failed
// trial and its retry, and one trial still running. The counts the views must show are returned.
#pragma once

#include <string>

namespace ftune::report::test_fixture {

struct StudyCounts {
  int trials = 0, complete = 0, pruned = 0, failed = 0, running = 0, retries = 0;
  int intermediate = 0;  // reports over all trials
  int reporting = 0;     // trials with at least one report
  int folds = 0;         // fold values over all trials
};

// Creates study `name` (maximize) in the storage `db` (a SQLite file or any storage URL) with `n` finished trials (plus one
// running); returns what it wrote.
StudyCounts write_study(const std::string& db, const std::string& name, int n);
// Adds one complete trial to the study (the dashboard's live-update test).
void add_complete_trial(const std::string& db, const std::string& name, double value);

}  // namespace ftune::report::test_fixture
