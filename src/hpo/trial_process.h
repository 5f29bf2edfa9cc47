// A trial command's process, tied to its worker's life. `/bin/sh -c COMMAND` runs under a small
// supervisor process that leads a process group of its own (so a prune, a timeout or Ctrl-C
// reaches everything the command started, and the terminal's Ctrl-C does not reach it by
// itself). The supervisor asks the kernel for a signal when the worker dies (prctl
// PR_SET_PDEATHSIG, Linux), even by kill -9; it then sends SIGTERM to the whole group and
// SIGKILL after kill_grace_s, so no trial command keeps running under init (a retried trial
// would otherwise run twice, side by side). Otherwise the supervisor only waits for the shell and
// exits as it did (same status, same signal). Its standard output is a pipe the worker reads
// line by line with a timeout, so the worker can poll for a stop request between lines.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ftune::hpo {

class TrialProcess {
 public:
  // Starts `command` with the worker's environment plus `env` ("NAME=value" entries, replacing
  // variables of the same name). Error when the pipe or the fork fails.
  TrialProcess(const std::string& command, const std::vector<std::string>& env,
               double kill_grace_s);
  ~TrialProcess();  // kills (SIGKILL) and reaps the group if it still runs
  TrialProcess(const TrialProcess&) = delete;
  TrialProcess& operator=(const TrialProcess&) = delete;

  enum class Read { Line, Timeout, End };
  // The next line of the command's standard output (without its line ending), waiting at most
  // `timeout_s`; End once the output is closed (the command ended, or closed it).
  Read read_line(std::string& line, double timeout_s);
  // Waits for the command to end after End; returns its wait status (as waitpid reports it),
  // then kills whatever it left running in its group.
  int wait();
  // SIGTERM to the whole group, then SIGKILL to what is left after kill_grace_s; reaps.
  void terminate();
  // SIGKILL to the whole group at once; reaps.
  void kill();

  pid_t group() const { return pid_; }

 private:
  void reap();  // waits for the supervisor (if not yet reaped) and kills the group's rest

  pid_t pid_ = -1;  // the supervisor: the group's leader
  int fd_ = -1;     // read end of the command's standard output
  double kill_grace_s_;
  std::string buffer_;  // read but not yet returned
  bool eof_ = false;
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace ftune::hpo
