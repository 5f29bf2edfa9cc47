// A data-parallel trial's run under the search's launcher (see rank_trial.h).
#include "hpo/rank_trial.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "hpo/command_objective.h"
#include "hpo/trial_process.h"
#include "io/json_file.h"

namespace ftune::hpo {
namespace fs = std::filesystem;

namespace {

// This program (the trial's ranks run the same ftune as its worker).
std::string self_binary() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error(fmt::format("cannot find this program's path (/proc/self/exe: {})", ec.message()));
  return p.string();
}

// New validation lines of metrics.jsonl since the last call (whole lines only: rank 0 writes
// each line at once and flushes it).
class MetricsTail {
 public:
  explicit MetricsTail(fs::path path) : path_(std::move(path)) {}
  template <typename F>
  bool each_new_eval(F&& f) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return false;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline yet: a line still being written
      offset_ += line.size() + 1;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("split", "") == "validation" && f(j)) return true;
    }
    return false;
  }

 private:
  fs::path path_;
  size_t offset_ = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

}  // namespace

std::string launcher_command(const RankLaunch& launch) {
  std::string cmd = launch.launcher;
  const size_t at = cmd.find("{ranks}");
  if (at == std::string::npos)
    throw InputError(
        fmt::format("trial_launcher '{}' has no {{ranks}} (where the rank count goes, "
                    "e.g. 'mpirun -np {{ranks}}')",
                    launch.launcher));
  return cmd.replace(at, 7, std::to_string(launch.ranks));
}

RankRunResult run_trial_ranks(const RankLaunch& launch, const std::string& train_config,
                              const std::vector<std::string>& overrides, bool resume,
                              const std::string& run_dir, int64_t trial,
                              const std::function<bool(int64_t, const nlohmann::json&)>& on_eval,
                              const std::function<bool()>& stop_requested) {
  std::string cmd = fmt::format("{} {} train --config {}", launcher_command(launch),
                                shell_quote(self_binary()), shell_quote(train_config));
  for (const std::string& o : overrides) cmd.append(" ").append(shell_quote(o));
  if (resume) cmd += " --resume";
  cmd += " 2>&1";
  spdlog::info("trial {}: {} ranks: {}", trial, launch.ranks, cmd);
  // A stale metrics file of an earlier run in this directory is not this run's: only lines
  // appended from now on count (a resumed run appends to it).
  MetricsTail tail(fs::path(run_dir) / "metrics.jsonl");
  tail.each_new_eval([](const nlohmann::json&) { return false; });
  // Stopping: the file FTUNE_STOP_FILE names appears (every rank's trainer polls it at each step
  // boundary and they agree to stop, with a checkpoint), which works under any launcher; the
  // ranks get kill_grace_s to reach their next step before the launcher is terminated.
  const fs::path stop_file = fs::path(run_dir).concat(".stop");
  fs::remove(stop_file);
  TrialProcess ranks(cmd, {"FTUNE_STOP_FILE=" + stop_file.string()}, launch.kill_grace_s);
  std::deque<std::string> last;  // the run's last lines of output, for a failure's message
  RankRunResult result;
  std::string line;
  std::optional<std::chrono::steady_clock::time_point> stop_sent;
  for (;;) {
    if (!stop_sent && (stop_requested() || tail.each_new_eval([&](const nlohmann::json& eval) {
          return on_eval(eval.value("step", int64_t{0}), eval);
        }))) {
      std::ofstream(stop_file) << "stop\n";
      stop_sent = std::chrono::steady_clock::now();
      result.stopped = true;
    }
    if (stop_sent && std::chrono::steady_clock::now() - *stop_sent >
                         std::chrono::duration<double>(launch.kill_grace_s)) {
      spdlog::warn("trial {}: its ranks did not stop within {} s of the request; terminating them",
                   trial, launch.kill_grace_s);
      ranks.terminate();
      fs::remove(stop_file);
      return result;
    }
    const TrialProcess::Read r = ranks.read_line(line, 0.2);
    if (r == TrialProcess::Read::End) break;
    if (r == TrialProcess::Read::Timeout) continue;
    spdlog::debug("trial {}: {}", trial, line);
    last.push_back(line);
    if (last.size() > 20) last.pop_front();
  }
  const int status = ranks.wait();
  if (result.stopped) {  // stopped at a step, checkpoint saved (or ended meanwhile)
    fs::remove(stop_file);
    return result;
  }
  // Evaluations written just before the end still reach the pruner (its record of the trial).
  tail.each_new_eval([&](const nlohmann::json& eval) {
    on_eval(eval.value("step", int64_t{0}), eval);
    return false;
  });
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string tail_text;
    for (const std::string& l : last) tail_text += "\n  " + l;
    throw Error(fmt::format("trial {}: its {} ranks failed ({}); the run's last lines:{}", trial,
                            launch.ranks, describe_status(status), tail_text));
  }
  const fs::path summary = fs::path(run_dir) / "summary.json";
  if (!fs::exists(summary))
    throw Error(
        fmt::format("trial {}: its ranks ended without writing {}", trial, summary.string()));
  result.summary = io::read_json_file(summary.string());
  return result;
}

}  // namespace ftune::hpo
