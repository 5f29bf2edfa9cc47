// Signal handling of a search worker (see interrupt.h). The handler only does async-signal-safe
// work: store a flag, kill a process group, restore the default action.
#include "hpo/interrupt.h"

#include <signal.h>

#include <atomic>

#include "core/signal_stack.h"

namespace ftune::hpo {

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<pid_t> g_command_group{0};

void on_signal(int sig) {
  g_interrupted.store(true);
  const pid_t group = g_command_group.load();
  if (group > 0) kill(-group, SIGKILL);
  signal(sig, SIG_DFL);  // a second Ctrl-C ends the worker at once
}

}  // namespace

void install_interrupt_handlers() {
  install_signal_handler(SIGINT, on_signal, SA_RESTART);
  install_signal_handler(SIGTERM, on_signal, SA_RESTART);
}

bool interrupted() {
  return g_interrupted.load();
}

void mark_interrupted() {
  g_interrupted.store(true);
}

InterruptScope::InterruptScope() {
  sigaction(SIGINT, nullptr, &old_int_);
  sigaction(SIGTERM, nullptr, &old_term_);
  g_interrupted.store(false);
  install_interrupt_handlers();
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_interrupted.store(false);
}

void set_running_command(pid_t group) {
  g_command_group.store(group);
  if (group > 0 && g_interrupted.load()) kill(-group, SIGKILL);  // a signal just before
}

}  // namespace ftune::hpo
