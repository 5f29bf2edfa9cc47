// JSON forms of distributions, parameter sets and whole trials: how a storage keeps a trial's
// params (with the distribution each was drawn from), and what `ftune hpo export` writes.
#pragma once

#include <nlohmann/json.hpp>

#include "hpo/trial.h"

namespace ftune::hpo {

nlohmann::json distribution_to_json(const Distribution& d);
// InputError naming `where` when the JSON is not a distribution written by distribution_to_json.
Distribution distribution_from_json(const nlohmann::json& j, const std::string& where);

// {"params": {name: value}, "distributions": {name: distribution}}
nlohmann::json params_to_json(const Params& params,
                              const std::map<std::string, Distribution>& distributions);
void params_from_json(const nlohmann::json& j, const std::string& where, Params& params,
                      std::map<std::string, Distribution>& distributions);

// Every field of the trial (params in internal form; NaN/inf values as null).
nlohmann::json trial_to_json(const Trial& t);

}  // namespace ftune::hpo
