// Shell runner for CLI tests.
#include "run_cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "test_util.h"

namespace ftune::test {

namespace {

CliResult run_ftune_command(const std::string& cmd) {
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// mpirun as root, oversubscribed, unbound, without the shared-memory single copy (containers).
constexpr const char* kMpiEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
    "OMPI_MCA_btl_vader_single_copy_mechanism=none ";
constexpr const char* kMpirun = "mpirun --oversubscribe --bind-to none ";

}  // namespace

CliResult run_ftune(const std::string& args, const std::string& env, Streams streams) {
  return run_ftune_command((env.empty() ? "" : env + " ") + ftune_binary() + " " + args +
                           (streams == Streams::kBoth ? " 2>&1" : " 2>/dev/null"));
}

CliResult run_ftune_ranks(int ranks, const std::string& args, const std::string& rank_env) {
  // Killed after 300 s: a hung collective fails the test instead of the whole suite's timeout.
  std::string cmd = std::string(kMpiEnv) + "timeout -k 10 300 " + kMpirun;
  if (rank_env.empty()) {
    cmd += "-np " + std::to_string(ranks) + " " + ftune_binary() + " " + args;
  } else {
    if (ranks > 1) cmd += "-np " + std::to_string(ranks - 1) + " " + ftune_binary() + " " + args + " : ";
    std::string exports;
    for (size_t i = 0; i < rank_env.size();) {  // each NAME=value word as -x NAME=value
      const size_t end = std::min(rank_env.find(' ', i), rank_env.size());
      if (end > i) exports += "-x " + rank_env.substr(i, end - i) + " ";
      i = end + 1;
    }
    cmd += "-np 1 " + exports + ftune_binary() + " " + args;
  }
  return run_ftune_command(cmd + " 2>&1");
}

pid_t spawn_ftune(const std::string& args, const std::string& log, const std::string& env) {
  const std::string cmd =
      "exec env " + env + " " + ftune_binary() + " " + args + " > '" + log + "' 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

pid_t spawn_ftune_ranks(int ranks, const std::string& args, const std::string& log,
                        const std::string& env) {
  const std::string cmd = "exec env " + std::string(kMpiEnv) + env + " " + kMpirun + "-np " +
                          std::to_string(ranks) + " " + ftune_binary() + " " + args + " > '" +
                          log + "' 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);
  return pid;
}

int wait_ftune(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

bool wait_for_text(const std::string& path, const std::string& text, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (file_bytes(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace ftune::test
