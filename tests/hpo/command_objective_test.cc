// The command objective: how params reach the command (arguments, FTUNE_TRIAL_PARAMS), how its
// report lines are read, and how it fails (bad lines, non-zero exit, no value).
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hpo/command_objective.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

class RecordingReporter : public TrialReporter {
 public:
  bool stop_requested() const override { return stop.load(); }
  std::atomic<bool> stop{false};
  std::atomic<int> reports{0};
  bool report(int64_t step, double value) override {
    steps[step] = value;
    ++reports;
    return prune_at >= 0 && step >= prune_at;
  }
  using TrialReporter::report_fold;
  bool report_fold(int64_t fold, double value, int64_t step) override {
    folds[fold] = value;
    return report(step, value);
  }
  std::map<int64_t, double> steps, folds;
  int64_t prune_at = -1;
};

SearchSpace space() {
  return SearchSpace::parse(YAML::Load("{lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}, "
                                       "opt: {type: categorical, choices: [adamw, \"it's\"]}, "
                                       "bs: {type: int, low: 8, high: 64}}"),
                            "test");
}

Trial trial() {
  Trial t;
  t.number = 7;
  t.params = {{"lr", 3e-4}, {"opt", 1}, {"bs", 32}};
  return t;
}

TEST(CommandObjective, PassesParamsAsArgumentsAndJson) {
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  CommandObjective o("train", {{"epochs", "3"}}, true, 1);
  EXPECT_EQ(o.command_line(trial(), space()),
            "train '--epochs=3' '--bs=32' '--lr=0.0003' '--opt=it'\\''s'");
  const auto j = nlohmann::json::parse(o.params_json(trial(), space()));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"epochs": 3, "bs": 32, "lr": 0.0003, "opt": "it's"})"));
  CommandObjective no_args("train", {}, false, 1);
  EXPECT_EQ(no_args.command_line(trial(), space()), "train");
}

TEST(CommandObjective, ReadsReportLinesAndTheEnvironment) {
  // The command echoes what it received, so the test sees both channels.
  CommandObjective o(
      "test \"$FTUNE_TRIAL_NUMBER\" = 7 || exit 9; "
      "echo \"$FTUNE_TRIAL_PARAMS\" | grep -q '\"opt\":\"it'\"'\"'s\"' || exit 8; "
      "echo hello; echo 'intermediate 0 1.5'; echo 'intermediate 1 0.5'; echo 'value 0.25'; : ",
      {}, true, 1);
  RecordingReporter r;
  EXPECT_EQ(o.run(trial(), space(), r), 0.25);
  EXPECT_EQ(r.steps, (std::map<int64_t, double>{{0, 1.5}, {1, 0.5}}));

  CommandObjective folds("echo 'fold 0 0.5'; echo 'fold 1 0.75'; :", {}, false, 2);
  RecordingReporter rf;
  EXPECT_EQ(folds.run(trial(), space(), rf), 0.625);  // no value line: the mean of the folds
  EXPECT_EQ(rf.folds.size(), 2u);
}

TEST(CommandObjective, PruneKillsTheCommand) {
  CommandObjective o("i=0; while :; do echo \"intermediate $i 1\"; i=$((i+1)); sleep 0.01; done",
                     {}, false, 1);
  RecordingReporter r;
  r.prune_at = 3;
  EXPECT_THROW(o.run(trial(), space(), r), TrialPruned);
  EXPECT_EQ(r.steps.size(), 4u);
}

// A stop request (the trial's time is up) ends the command's whole process group, SIGTERM first:
// here the shell and the child it waits for both go at once, long before kill_grace_s.
TEST(CommandObjective, StopRequestTerminatesTheWholeGroup) {
  test::TempDir dir;
  const std::string pid_file = dir.path() + "/child.pid";
  CommandObjective o("sleep 1000 & echo $! > " + pid_file + "; echo 'intermediate 0 1'; wait", {},
                     false, 1, /*kill_grace_s=*/30);
  RecordingReporter r;
  std::thread stopper([&] {
    while (r.reports.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r.stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(o.run(trial(), space(), r), Error);
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  int child = 0;
  std::ifstream(pid_file) >> child;
  ASSERT_GT(child, 0);
  // Gone (kill(pid, 0) fails) or a zombie that init has yet to reap. The signal was sent before
  // run() returned, but a loaded machine may not have scheduled the child's exit yet: allow it
  // 5 s (a survivor of SIGTERM, as before the group kill, stays past that).
  std::string stat;
  bool gone = false;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       !gone && std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    stat.clear();
    std::getline(std::ifstream("/proc/" + std::to_string(child) + "/stat"), stat);
    gone = kill(child, 0) != 0 || stat.find(") Z ") != std::string::npos;
  }
  EXPECT_TRUE(gone) << "the command's child survived: " << stat;
  kill(child, SIGKILL);
}

TEST(CommandObjective, FailuresSayWhy) {
  RecordingReporter r;
  auto error_of = [&](const std::string& cmd) -> std::string {
    try {
      CommandObjective(cmd, {}, false, 1).run(trial(), space(), r);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(error_of("exit 3").find("trial 7: command exited with status 3"), std::string::npos);
  EXPECT_NE(error_of("echo 'intermediate x 1'").find("'x' is not an integer"), std::string::npos);
  EXPECT_NE(error_of("echo 'value'").find("expected 'value V'"), std::string::npos);
  EXPECT_NE(error_of("echo done").find("printed no 'value V' line"), std::string::npos);
  EXPECT_NE(error_of("kill -9 $$").find("killed by signal 9"), std::string::npos);
}

}  // namespace
}  // namespace ftune::hpo
