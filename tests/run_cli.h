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
// `env` ("NAME=value ...") is set for this run only.
CliResult run_ftune(const std::string& args, const std::string& env = "");

}  // namespace ftune::test
