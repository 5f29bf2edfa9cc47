// Helpers of the `ftune hpo` end-to-end tests (hpo_cli_test.cc, hpo_cli_failfast_test.cc): the
// scripted trial command, a search config that runs it, and waiting on files and processes.
#pragma once

#include <string>

namespace ftune::hpo {

// The trial command: reads --x=, --y= and answers with an intermediate value, two folds and
// the value x^2 + y. MODE slow: sleeps briefly; heavy: 300 intermediate reports; killme: the
// first trial to run never ends (it prints a line every 0.1 s, so once its worker is dead the
// closed pipe ends it) after leaving a marker file; stall: the first trial to run leaves a marker
// file, waits for the file $DIR/go and then prints only "value 7"; hang: starts a child that
// sleeps for good (its pid in $DIR/child.pid), reports once and waits for it; stubborn: the same
// but ignoring SIGTERM (the child too), so only SIGKILL ends it.
void write_objective(const std::string& dir);

// `grace_s`: how long a silent worker's trial stays RUNNING. The tests of worker death use a short
// one; the concurrency tests a long one, so a loaded machine (heartbeats delayed past the grace
// period) cannot turn live trials into retries and change the trial count they check.
std::string write_config(const std::string& dir, const std::string& storage,
                         const std::string& mode, const std::string& extra = "",
                         const std::string& grace_s = "1.5");

// Polls every 20 ms until `path` exists; false after 30 s.
bool wait_for_file(const std::string& path);

// True when `pid` no longer runs (gone, or a zombie nobody reaped yet).
bool process_gone(int pid);

}  // namespace ftune::hpo
