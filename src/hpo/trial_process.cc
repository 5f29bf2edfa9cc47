// The trial command's supervisor process and the worker's side of it (see trial_process.h).
// Between fork and exec only async-signal-safe calls run (the worker has other threads: its
// heartbeat, the trainer's pools), so the environment and arguments are built before the fork.
// The supervisor blocks the signals it handles and takes them with sigwaitinfo: no handlers.
#include "hpo/trial_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "core/error.h"
#include "hpo/interrupt.h"

extern char** environ;

namespace ftune::hpo {

namespace {

using Clock = std::chrono::steady_clock;

// The kernel sends this to the supervisor when the worker dies (PR_SET_PDEATHSIG). Anyone may
// send SIGUSR1 too (the command to its own group, say): the supervisor acts only when its parent
// is really gone.
constexpr int kWorkerDied = SIGUSR1;

// The worker is gone: SIGTERM to the whole group (the supervisor blocks it), SIGKILL to what is
// left after the grace period (the supervisor included).
[[noreturn]] void stop_group(double grace_s) {
  kill(0, SIGTERM);
  timespec ts{static_cast<time_t>(grace_s),
              static_cast<long>((grace_s - std::floor(grace_s)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  kill(0, SIGKILL);
  _exit(137);
}

// Ends the supervisor the way the shell ended: the same exit status, or the same signal.
[[noreturn]] void exit_as(int status) {
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  // the shell's crash, not the supervisor's
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  kill(getpid(), sig);
  sigprocmask(SIG_UNBLOCK, &one, nullptr);
  _exit(128 + sig);
}

// The supervisor: runs in the forked child with `waited` blocked (the parent blocked them before
// the fork); `old_mask` is the mask the command gets.
[[noreturn]] void supervise(char* const argv[], char* const envp[], int out_w, pid_t parent,
                            double grace_s, const sigset_t& old_mask, const sigset_t& waited) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, kWorkerDied);
  if (getppid() != parent) stop_group(grace_s);  // the worker died before prctl
  const pid_t shell = fork();
  if (shell < 0) _exit(127);
  if (shell == 0) {
    dup2(out_w, STDOUT_FILENO);
    close_range(3, ~0U, 0);  // the worker's files and sockets are none of the command's business
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    execve("/bin/sh", argv, envp);
    _exit(127);
  }
  close_range(3, ~0U, 0);  // both ends of the pipe: the worker sees EOF when the command ends
  for (;;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&waited, &info);
    if (sig == SIGCHLD) {
      int status = 0;
      if (waitpid(shell, &status, WNOHANG) == shell) exit_as(status);
    } else if (sig == kWorkerDied && getppid() != parent) {
      stop_group(grace_s);
    }
    // SIGTERM, SIGINT, SIGHUP sent to the group are for the command, which got them too.
  }
}

}  // namespace

TrialProcess::TrialProcess(const std::string& command, const std::vector<std::string>& env,
                           double kill_grace_s)
    : kill_grace_s_(kill_grace_s) {
  std::set<std::string> replaced;
  for (const std::string& e : env) replaced.insert(e.substr(0, e.find('=')));
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    if (!replaced.count(var.substr(0, var.find('=')))) vars.push_back(var);
  }
  vars.insert(vars.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string sh = "sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  sigset_t waited, old_mask;
  sigemptyset(&waited);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, kWorkerDied}) sigaddset(&waited, sig);
  pthread_sigmask(SIG_BLOCK, &waited, &old_mask);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) supervise(argv, envp.data(), out[1], parent, kill_grace_s, old_mask, waited);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  close(out[1]);
  if (pid < 0) {
    close(out[0]);
    throw Error(fmt::format("fork: {}", std::strerror(fork_errno)));
  }
  setpgid(pid, pid);  // also here: no window in which the group does not exist yet
  pid_ = pid;
  fd_ = out[0];
  set_running_command(pid_);
}

TrialProcess::~TrialProcess() {
  if (!reaped_) kill();
  if (fd_ >= 0) close(fd_);
}

TrialProcess::Read TrialProcess::read_line(std::string& line, double timeout_s) {
  constexpr size_t kMaxLine = 1 << 20;  // a longer line is handed on in pieces
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos || buffer_.size() >= kMaxLine || (eof_ && !buffer_.empty())) {
      const size_t n = nl != std::string::npos ? nl : std::min(buffer_.size(), kMaxLine);
      line.assign(buffer_, 0, n);
      buffer_.erase(0, nl != std::string::npos ? n + 1 : n);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return Read::Line;
    }
    if (eof_) return Read::End;
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::ceil(timeout_s * 1000)));
    if (r == 0 || (r < 0 && errno == EINTR)) return Read::Timeout;
    if (r < 0) throw Error(fmt::format("poll: {}", std::strerror(errno)));
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw Error(fmt::format("read from the trial command: {}", std::strerror(errno)));
    if (n == 0)
      eof_ = true;
    else
      buffer_.append(buf, static_cast<size_t>(n));
  }
}

void TrialProcess::reap() {
  set_running_command(0);
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  ::kill(-pid_, SIGKILL);  // anything the command left running in its group
}

int TrialProcess::wait() {
  reap();
  return status_;
}

void TrialProcess::terminate() {
  if (reaped_) return;
  ::kill(-pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(kill_grace_s_));
  for (;;) {
    const pid_t r = waitpid(pid_, &status_, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      reaped_ = true;
      break;
    }
    if (Clock::now() >= deadline) {
      ::kill(-pid_, SIGKILL);
      break;
    }
    // Drain its output meanwhile: a command blocked on a full pipe could not get to its exit.
    std::string ignored;
    if (!eof_)
      read_line(ignored, 0.05);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  reap();
}

void TrialProcess::kill() {
  if (!reaped_) ::kill(-pid_, SIGKILL);
  reap();
}

}  // namespace ftune::hpo
