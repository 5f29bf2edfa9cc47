// Checks of command-line values shared by the verbs, with messages in words ("--batch-size: must
// be a positive integer, got '0'") rather than CLI11's numeric ranges. A failed check is a usage
// error: main() prints it and exits with status 2.
#pragma once

#include <CLI/CLI.hpp>

namespace ftune::cli {

// An integer >= 1 (batch sizes, lengths).
CLI::Validator positive_integer();
// An integer >= 0 (thread counts: 0 means all cores).
CLI::Validator non_negative_integer();
// A probability strictly between 0 and 1 (binary decision thresholds).
CLI::Validator open_probability();

}  // namespace ftune::cli
