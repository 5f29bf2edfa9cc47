// Systems benchmark of the study storage and worker loop (no training): trials/s with 1, 4 and 16
// worker processes sharing one storage, with a trivial in-process objective (one intermediate
// report, value x^2 + y) and the random sampler, so what is measured is the storage round trips
// of a trial's life (start, params, report, heartbeat thread, finish, incremental feed, stale
// check). Then the time from a kill -9 of a worker mid-trial to its trial being retried
// (RUNNING again in another worker) and completed.
//
//   hpo_systems --storage URL [--trials N] [--workers 1,4,16] [--heartbeat 0.5 --grace 2]
//
// Prints one markdown table row per measurement. bench/run_hpo_systems.sh runs it on SQLite and
// on a scratch PostgreSQL server, next to bench/optuna_systems.py.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "hpo/objective.h"
#include "hpo/pruner.h"
#include "hpo/sampler.h"
#include "hpo/search_space.h"
#include "hpo/storage.h"
#include "hpo/worker.h"

using namespace ftune;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSpace = "{x: {type: float, low: -3, high: 3}, y: {type: int, low: 0, high: 4}}";

class TrivialObjective : public hpo::Objective {
 public:
  explicit TrivialObjective(bool block_forever) : block_(block_forever) {}
  double run(const hpo::Trial& t, const hpo::SearchSpace&, hpo::TrialReporter& r) override {
    const double v = t.params.at("x") * t.params.at("x") + t.params.at("y");
    r.report(0, v);
    while (block_) std::this_thread::sleep_for(std::chrono::seconds(1));
    return v;
  }

 private:
  bool block_;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs one worker in a child process; returns its pid.
pid_t spawn_worker(const std::string& url, const std::string& study, int64_t trials,
                   double heartbeat, double grace, bool block, uint64_t seed) {
  std::fflush(nullptr);  // or the child prints the parent's buffered output again
  const pid_t pid = fork();
  if (pid != 0) return pid;
  try {
    spdlog::set_level(spdlog::level::warn);
    auto storage = hpo::open_storage(url);
    const auto space = hpo::SearchSpace::parse(YAML::Load(kSpace), "bench");
    const auto info =
        storage->create_or_load_study(study, hpo::Direction::Minimize, space.to_json());
    YAML::Node sampler_cfg = YAML::Load("{type: random}");
    auto sampler = hpo::make_sampler(sampler_cfg, "bench", hpo::Direction::Minimize, seed);
    TrivialObjective objective(block);
    hpo::WorkerOptions o;
    o.max_trials = trials;
    o.heartbeat_s = heartbeat;
    o.grace_s = grace;
    o.retries = 1;
    hpo::Worker(*storage, info, space, *sampler, nullptr, objective, o).run();
    std::fflush(nullptr);
    _exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker failed: %s\n", e.what());
    _exit(1);
  }
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, workers = "1,4,16", kind;
  int64_t trials = 400;
  double heartbeat = 0.5, grace = 2.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--storage")
      url = v;
    else if (a == "--trials")
      trials = std::stoll(v);
    else if (a == "--workers")
      workers = v;
    else if (a == "--heartbeat")
      heartbeat = std::stod(v);
    else if (a == "--grace")
      grace = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 1;
    }
  }
  if (url.empty()) {
    std::fprintf(stderr, "usage: hpo_systems --storage URL [--trials N] [--workers 1,4,16]\n");
    return 1;
  }
  kind = url.rfind("postgres", 0) == 0 ? "PostgreSQL" : "SQLite";
  const std::string tag = std::to_string(getpid());
  std::printf(
      "| system | storage | workers | trials | wall s | trials/s | failed | duplicates |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int w : parse_list(workers)) {
    const std::string study = fmt::format("throughput_{}_{}", w, tag);
    hpo::open_storage(url)->create_or_load_study(
        study, hpo::Direction::Minimize,
        hpo::SearchSpace::parse(YAML::Load(kSpace), "bench").to_json());
    const auto start = Clock::now();
    std::vector<pid_t> pids;
    for (int i = 0; i < w; ++i)
      pids.push_back(spawn_worker(url, study, trials, heartbeat, grace, false, 1));
    int bad_exits = 0;
    for (pid_t p : pids) {
      int status = 0;
      waitpid(p, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad_exits;
    }
    const double wall = seconds_since(start);
    auto storage = hpo::open_storage(url);
    const auto all = storage->trials(storage->find_study(study)->id);
    int64_t failed = bad_exits, complete = 0;
    std::set<int64_t> numbers;
    for (const auto& t : all) {
      numbers.insert(t.number);
      if (t.state == hpo::TrialState::Complete)
        ++complete;
      else
        ++failed;
    }
    std::printf("| ftune | %s | %d | %lld | %.2f | %.1f | %lld | %lld |\n", kind.c_str(), w,
                static_cast<long long>(complete), wall, complete / wall,
                static_cast<long long>(failed),
                static_cast<long long>(all.size() - numbers.size()));
    std::fflush(stdout);
  }

  // Kill -9 of a worker mid-trial: worker A blocks in its trial; kill it; worker B (budget 1,
  // spent by A's trial) waits, fails the trial once its heartbeat is older than the grace
  // period, and runs the retry.
  const std::string study = "kill_" + tag;
  auto storage = hpo::open_storage(url);
  const auto info =
      storage->create_or_load_study(study, hpo::Direction::Minimize,
                                    hpo::SearchSpace::parse(YAML::Load(kSpace), "bench").to_json());
  const pid_t a = spawn_worker(url, study, 1, heartbeat, grace, true, 2);
  while (storage->running_trials(info.id).empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(a, SIGKILL);
  waitpid(a, nullptr, 0);
  const auto killed = Clock::now();
  const pid_t b = spawn_worker(url, study, 1, heartbeat, grace, false, 3);
  double retried_s = -1, done_s = -1;
  while (done_s < 0 && seconds_since(killed) < 60 + 10 * grace) {
    for (const auto& t : storage->trials(info.id)) {
      if (t.retry_of < 0) continue;
      if (retried_s < 0 && t.state != hpo::TrialState::Waiting) retried_s = seconds_since(killed);
      if (t.state == hpo::TrialState::Complete) done_s = seconds_since(killed);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  waitpid(b, nullptr, 0);
  std::printf(
      "\nkill -9 mid-trial (%s, heartbeat_s %.1f, grace_s %.1f): retry running after %.2f s, "
      "complete after %.2f s\n",
      kind.c_str(), heartbeat, grace, retried_s, done_s);
  return 0;
}
