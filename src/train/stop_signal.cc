// Signal handlers for graceful stop (see stop_signal.h).
#include "train/stop_signal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

#include "core/signal_stack.h"

namespace ftune {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_term, g_old_int;

// A stopping process must reach its checkpoint even when nobody reads its output any more:
// OpenMPI 4.1's mpirun, once it has a SIGTERM itself, stops reading its ranks' output pipes until
// they exit, so a rank that logs past the pipe's 64 KiB blocked in write() until SIGKILL, its
// checkpoint unwritten. From the signal on, a pipe or socket on stdout/stderr is non-blocking:
// a line that does not fit is dropped (summary.json still records the stop), a blocked write
// returns. Terminals and files are left as they are (a terminal's description is the shell's too).
void stop_blocking_on(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return;
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

extern "C" void on_stop_signal(int sig) {
  const int saved_errno = errno;
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
  stop_blocking_on(STDOUT_FILENO);
  stop_blocking_on(STDERR_FILENO);
  errno = saved_errno;
}

}  // namespace

StopSignal::StopSignal() {
  g_signal = 0;
  install_signal_handler(SIGTERM, on_stop_signal, 0, &g_old_term);
  install_signal_handler(SIGINT, on_stop_signal, 0, &g_old_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

bool StopSignal::requested() const {
  return g_signal.load() != 0;
}
int StopSignal::signal() const {
  return g_signal.load();
}

}  // namespace ftune
