// What the `ftune hpo run` tests of test_train share: a study's trials as `ftune hpo export
// --format json` writes them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_cli.h"

namespace ftune::test {

// The trials of the study `search_config` names, exported into dir/trials.json.
inline nlohmann::json exported_trials(const std::string& search_config, const std::string& dir) {
  const CliResult e = run_ftune("hpo export --config " + search_config +
                                " --format json --output " + dir + "/trials.json");
  EXPECT_EQ(e.exit_code, 0) << e.output;
  const auto trials = nlohmann::json::parse(std::ifstream(dir + "/trials.json"));
  return trials.is_array() ? trials : trials.at("trials");
}

}  // namespace ftune::test
