// Ctrl-C / SIGTERM for a search worker. The first signal kills the trial command's process group
// (it runs in a group of its own, trial_process.h, so the terminal's Ctrl-C does not reach it by
// itself), the trial ends FAILED "interrupted" at once instead of staying RUNNING until its grace
// period, and the worker starts no further trial. A second signal ends the worker the default way.
#pragma once

#include <signal.h>
#include <sys/types.h>

namespace ftune::hpo {

void install_interrupt_handlers();
bool interrupted();
// Marks the worker interrupted as a signal would (an objective that saw Ctrl-C itself: a Python
// function whose training run was interrupted).
void mark_interrupted();

// The handlers for the length of one worker inside a process that lives on (the Python package):
// installs them, and on destruction puts back the handlers that were there and clears the flag.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};
// The process group of the command now running (0: none); killed on interrupt.
void set_running_command(pid_t group);

}  // namespace ftune::hpo
