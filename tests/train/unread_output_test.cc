// A run whose output nobody reads any more (mpirun after its own SIGTERM stops reading its ranks'
// pipes until they exit) still stops cleanly on SIGTERM: its log pipe is full, the process is
// blocked writing to it, and the signal must still bring it to a checkpoint, the summary and exit
// status 143. Before the fix the process stayed blocked in write() for good.
#include <fcntl.h>
#include <limits.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

TEST(UnreadOutput, SigtermStopsARunBlockedOnAFullLogPipe) {
  TempDir tmp;
  write_tiny_bert(tmp.path() + "/tiny");
  write_pair_task(tmp.path() + "/train.jsonl", 64, 1);
  const std::string run = tmp.path() + "/run", config = tmp.path() + "/run.yaml";
  // A line a step and never an end of its own: the pipe fills within a second or two.
  std::ofstream(config) << "model:\n  path: " << tmp.path() << "/tiny\ndata:\n  train: "
                        << tmp.path() << "/train.jsonl\n  max_length: 16\n"
                        << "training:\n  max_steps: 1000000\n  batch_size: 8\n"
                        << "  log_every: 1\n  threads: 1\n"
                        << "output:\n  dir: " << run << "\n  progress: plain\n";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    const int null_fd = open("/dev/null", O_WRONLY);
    dup2(null_fd, STDOUT_FILENO);
    close(fds[0]);
    const std::string bin = ftune_binary();
    execl(bin.c_str(), bin.c_str(), "train", "--config", config.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  const int capacity = fcntl(fds[0], F_GETPIPE_SZ);
  // Wait until the pipe is full (less room than an atomic write of PIPE_BUF bytes needs), reading nothing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int queued = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    ioctl(fds[0], FIONREAD, &queued);
    if (queued > capacity - PIPE_BUF) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // blocked in write() by now
  ASSERT_GT(queued, capacity - PIPE_BUF) << "the run never filled its log pipe";
  kill(pid, SIGTERM);
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      close(fds[0]);
      FAIL() << "the run did not stop within 60 s of SIGTERM with its log pipe full";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  close(fds[0]);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  ASSERT_TRUE(fs::exists(run + "/summary.json"));
  const nlohmann::json s = nlohmann::json::parse(file_bytes(run + "/summary.json"));
  EXPECT_EQ(s["status"], "interrupted") << s.dump();
  char name[32];
  std::snprintf(name, sizeof(name), "/checkpoints/step-%07d", s["steps"].get<int>());
  EXPECT_TRUE(fs::exists(run + name + "/model.safetensors")) << name;
}

}  // namespace
}  // namespace ftune::test
