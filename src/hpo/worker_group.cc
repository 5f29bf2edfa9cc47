// K search workers started and supervised by one `ftune hpo run` (see worker_group.h). Between
// fork and exec only async-signal-safe calls run (sched_setaffinity, setpgid, prctl, execve):
// the arguments, environments and CPU masks are built before the first fork.
#include "hpo/worker_group.h"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/signal_stack.h"

extern char** environ;

namespace ftune::hpo {
namespace {

constexpr const char* kSlotVariable = "FTUNE_HPO_WORKER_SLOT";

std::atomic<pid_t> g_group{0};  // the workers' process group, for the signal handler

void pass_on(int sig) {
  const pid_t group = g_group.load();
  if (group > 0) ::kill(-group, sig);
}

}  // namespace

std::optional<WorkerSlot> worker_slot_from_env() {
  const char* v = std::getenv(kSlotVariable);
  if (!v || !*v) return std::nullopt;
  WorkerSlot s;
  char tail = 0;
  if (std::sscanf(v, "%d/%d%c", &s.index, &s.count, &tail) != 2 || s.count < 1 || s.index < 0 ||
      s.index >= s.count)
    throw InputError(fmt::format("{}='{}': expected INDEX/COUNT with 0 <= INDEX < COUNT (set by "
                                 "`ftune hpo run` for the workers it starts)",
                                 kSlotVariable, v));
  return s;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<int> worker_cores(const std::vector<int>& allowed, WorkerSlot slot) {
  const int n = static_cast<int>(allowed.size());
  if (n == 0) return {};
  if (n <= slot.count) return {allowed[static_cast<size_t>(slot.index % n)]};
  // Shares of n / count cores, the first n % count workers one more.
  const int base = n / slot.count, extra = n % slot.count;
  const int begin = slot.index * base + std::min(slot.index, extra);
  const int size = base + (slot.index < extra ? 1 : 0);
  return {allowed.begin() + begin, allowed.begin() + begin + size};
}

int run_worker_group(const std::vector<std::string>& argv, int count, bool pin_cores) {
  FTUNE_ASSERT(count >= 1 && !argv.empty(), "run_worker_group: {} workers", count);
  const std::vector<int> allowed = allowed_cpus();
  // Everything the children need, built before any fork.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kSlotVariable, std::strlen(kSlotVariable)) != 0 ||
        (*e)[std::strlen(kSlotVariable)] != '=')
      base_env.push_back(*e);
  std::vector<std::string> slot_env(static_cast<size_t>(count));
  std::vector<std::vector<char*>> envs(static_cast<size_t>(count));
  std::vector<cpu_set_t> masks(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    slot_env[i] = fmt::format("{}={}/{}", kSlotVariable, i, count);
    for (std::string& e : base_env) envs[i].push_back(e.data());
    envs[i].push_back(slot_env[i].data());
    envs[i].push_back(nullptr);
    CPU_ZERO(&masks[i]);
    const std::vector<int> cores = worker_cores(allowed, {i, count});
    for (int c : cores) CPU_SET(c, &masks[i]);
    if (pin_cores)
      spdlog::info("worker {} of {}: cores {}", i, count, fmt::join(cores, ","));
  }

  struct sigaction old_int = {}, old_term = {};
  install_signal_handler(SIGINT, pass_on, 0, &old_int);
  install_signal_handler(SIGTERM, pass_on, 0, &old_term);

  std::vector<pid_t> pids;
  const pid_t parent = getpid();
  for (int i = 0; i < count; ++i) {
    const pid_t group = g_group.load();
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      pass_on(SIGTERM);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      throw Error(fmt::format("fork: {}", std::strerror(err)));
    }
    if (pid == 0) {
      setpgid(0, group);  // the first worker leads the workers' group, the others join it
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(127);  // the supervisor died before the prctl
      if (pin_cores) sched_setaffinity(0, sizeof(cpu_set_t), &masks[i]);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      execve("/proc/self/exe", args.data(), envs[i].data());
      _exit(127);
    }
    setpgid(pid, group);  // also here: no window in which the child is outside the group
    if (i == 0) g_group.store(pid);
    pids.push_back(pid);
  }

  int code = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
    }
    const int c = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
    if (c != 0) spdlog::warn("worker {} of {} exited with {}", i, count, c);
    if (code == 0) code = c;
  }
  g_group.store(0);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return code;
}

}  // namespace ftune::hpo
