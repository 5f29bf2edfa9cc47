// What `ftune hpo status|best|export` show of a study: the best trial, a table of the trials, and
// the trials as JSON or CSV (one row per trial, params in their external form as in Optuna's
// trials_dataframe).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hpo/search_space.h"
#include "hpo/storage.h"

namespace ftune::hpo {

// The complete trial with the best value for the direction (the lowest number on ties).
std::optional<Trial> best_complete_trial(const std::vector<Trial>& trials, Direction direction);

// Counts by state, the best trial, the study's cost (hpo/study_cost.h; running trials counted up
// to `now`, seconds since the epoch), and one line per trial (number, state, value, params, what
// it retries and how it resumed that trial's work, its error).
std::string status_table(const StudyInfo& study, const SearchSpace& space,
                         const std::vector<Trial>& trials, double now);
// {"study": ..., "direction": ..., "trials": [trial_to_json + "params_external"]}; with `now`,
// also "cost": {compute_s, wall_s, by state, best_curve: [{compute_s, wall_s, best, trial}]}.
nlohmann::json trials_json(const StudyInfo& study, const SearchSpace& space,
                           const std::vector<Trial>& trials, std::optional<double> now = {});
// Header number,state,value,start_time,end_time,duration_s,retry_of,error,params_<name>...,
// fold_<k>...,attrs_<key>...,last_step,last_intermediate; then one row per trial.
std::string trials_csv(const SearchSpace& space, const std::vector<Trial>& trials);

}  // namespace ftune::hpo
