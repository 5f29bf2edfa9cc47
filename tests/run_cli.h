// Runs the built `ftune` binary in a shell and captures its exit code and output, for tests of
// the command line: exit codes, error messages naming file and line, files left behind. Also
// starts it in the background, for tests of concurrent runs and kills.
#pragma once

#include <sys/types.h>

#include <string>

namespace ftune::test {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together (stdout alone with kStdout)
};

enum class Streams { kBoth, kStdout };

// `args` is appended to the binary's path as shell words (quote paths with spaces yourself).
// `env` ("NAME=value ...", or any shell commands ending in ';') is set for this run only.
CliResult run_ftune(const std::string& args, const std::string& env = "",
                    Streams streams = Streams::kBoth);

// `ftune args` as `ranks` ranks of one data-parallel run under OpenMPI's mpirun (allowed to run as
// root, oversubscribing the cores, unbound). `rank_env` ("NAME=value ..."), when given, is set for
// the last rank alone (a fault injected into one rank).
CliResult run_ftune_ranks(int ranks, const std::string& args, const std::string& rank_env = "");

// Starts `ftune args` in the background with stdout and stderr going to `log`; returns the pid of
// the ftune process itself (the shell execs it). `env` is "NAME=value ..." assignments.
pid_t spawn_ftune(const std::string& args, const std::string& log, const std::string& env = "");
// Starts `ftune args` as `ranks` ranks under mpirun (as run_ftune_ranks, without its timeout) in
// the background, in a process group of its own, output to `log`; returns mpirun's pid (= the
// group's id). `env` ("NAME=value ...") is set for mpirun and every rank.
pid_t spawn_ftune_ranks(int ranks, const std::string& args, const std::string& log,
                        const std::string& env = "");
// Waits for a process from spawn_ftune: its exit code, or 128 + N when signal N ended it.
int wait_ftune(pid_t pid);
// Waits up to `seconds` for `text` to appear in the file at `path`; false on timeout.
bool wait_for_text(const std::string& path, const std::string& text, double seconds = 60);

}  // namespace ftune::test
