// Runs the built `ftune` binary in a shell and captures its exit code and output, for tests of
// the command line: exit codes, error messages naming file and line, files left behind.
#pragma once

#include <string>

namespace ftune::test {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `args` is appended to the binary's path as shell words (quote paths with spaces yourself).
CliResult run_ftune(const std::string& args);

}  // namespace ftune::test
