// Data-parallel training over processes (issue 20) with OpenMPI's mpirun on the CPU: 2 ranks
// follow the trajectory of one process with the same effective batch (per-step losses within
// 1e-6 relative, final weights within 1e-5; dropout on, a last batch the ranks split unevenly)
// and report the same FLOPs and tokens per sample; only rank 0 writes the run's files; an
// out-of-memory in one rank makes every rank fall back together (or, with nothing to halve, stop
// together, naming it); a rank that fails or is killed stops every rank with a message naming
// it, nothing half-written; the run resumes afterwards, on 2 ranks bit for bit as if never
// killed, or on another number of ranks (the world size may change on resume). A stop file seen by
// one rank, or a SIGTERM to mpirun with OpenMPI's kill timeout raised, stops every rank at one
// step with a checkpoint and the summary.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"
#include "trajectory_compare.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    // 61 rows: 7 step batches of 8 and a last one of 5 (rank 0 computes 2 of its rows, rank 1 3).
    write_pair_task(tmp_.path() + "/train.jsonl", 61, 1);
    write_pair_task(tmp_.path() + "/val.jsonl", 16, 2);
  }
  // 1 epoch of 8 steps, effective batch 8 (micro-batch 2 x accumulation 4 in one process, 2 x 2
  // on each of 2 ranks), dropout on, evaluation and checkpoints every 5 steps and at the end, 1
  // thread a rank.
  std::string config(const std::string& run) {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  validation: " << tmp_.path()
                        << "/val.jsonl\n  max_length: 24\n"
                        << "training:\n  epochs: 1\n  batch_size: 2\n  gradient_accumulation: 4\n"
                        << "  learning_rate: 3.0e-3\n  log_every: 1\n  threads: 1\n"
                        << "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n"
                        << "eval:\n  every_steps: 5\n"
                        << "checkpoint:\n  keep_last: 20\n"
                        << "output:\n  dir: " << run_dir(run) << "\n  progress: plain\n";
    return path;
  }
  std::string run_dir(const std::string& run) { return tmp_.path() + "/" + run; }

  // Per-step losses within 1e-6 relative, final weights within 1e-5 of each tensor's largest.
  void expect_same(const std::string& a, const std::string& b) {
    expect_same_trajectory(run_dir(a), run_dir(b), TrajectoryTolerance{8});
  }
  // Runs `ranks` ranks, the last with `rank_env`; the seconds it took.
  double timed_ranks(CliResult* r, int ranks, const std::string& args,
                     const std::string& rank_env) {
    const auto t0 = std::chrono::steady_clock::now();
    *r = run_ftune_ranks(ranks, args, rank_env);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void expect_identical(const std::string& a, const std::string& b) {
    EXPECT_EQ(logged_metrics(run_dir(a)), logged_metrics(run_dir(b)));
    const std::string wa = file_bytes(run_dir(a) + "/model/model.safetensors");
    ASSERT_FALSE(wa.empty());
    EXPECT_TRUE(wa == file_bytes(run_dir(b) + "/model/model.safetensors"))
        << "final weights differ";
  }
  // The summary of a run stopped at a step boundary: interrupted before its end, with the
  // checkpoint of that step whole.
  void expect_stopped_with_checkpoint(const std::string& run) {
    ASSERT_TRUE(fs::exists(run_dir(run) + "/summary.json")) << "no summary: the ranks were killed";
    const nlohmann::json s = nlohmann::json::parse(file_bytes(run_dir(run) + "/summary.json"));
    EXPECT_EQ(s["status"], "interrupted") << s.dump();
    const int steps = s["steps"].get<int>();
    EXPECT_LT(steps, s["total_steps"].get<int>());
    char name[32];
    std::snprintf(name, sizeof(name), "/checkpoints/step-%07d", steps);
    EXPECT_TRUE(fs::exists(run_dir(run) + name + "/model.safetensors")) << name;
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(DataParallel, TwoRanksFollowOneProcess) {
  const CliResult one = run_ftune("train --config " + config("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const CliResult two = run_ftune_ranks(2, "train --config " + config("two"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  expect_same("one", "two");
  // Rank 0 alone logged and wrote: one set of lines, one metrics line per step and evaluation.
  EXPECT_EQ(logged_metrics(run_dir("one")).size(), logged_metrics(run_dir("two")).size());
  size_t starts = 0;
  for (size_t at = 0; (at = two.output.find("] info training ", at)) != std::string::npos; ++at)
    ++starts;
  EXPECT_EQ(starts, 1u) << two.output;
  const auto summary = nlohmann::json::parse(file_bytes(run_dir("two") + "/summary.json"));
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["data_parallel"]["ranks"], 2);
  EXPECT_GT(summary["data_parallel"]["reduced_bytes_per_step"].get<int64_t>(), 0);
  // The layers' bucket (both tiny layers fit one) started during each step's last backward.
  EXPECT_EQ(summary["data_parallel"]["buckets_started_in_backward"],
            summary["data_parallel"]["steps"]);
  EXPECT_EQ(summary["data_parallel"]["steps"], 8);
  // FLOPs and tokens count every rank's micro-batches: the same as one process's.
  const auto single = nlohmann::json::parse(file_bytes(run_dir("one") + "/summary.json"));
  for (const char* key : {"flops_per_sample", "flops_per_sample_real", "padded_tokens_per_sample",
                          "real_tokens_per_sample", "padding_fraction"})
    EXPECT_NEAR(summary[key].get<double>(), single[key].get<double>(),
                1e-12 * single[key].get<double>())
        << key;
  EXPECT_EQ(summary["train_samples"], single["train_samples"]);
  EXPECT_EQ(summary["train_real_tokens"], single["train_real_tokens"]);
  EXPECT_EQ(summary["ranks"], 2);
  EXPECT_NEAR(summary["model_tflops_per_s_per_device"].get<double>() * 2,
              summary["model_tflops_per_s"].get<double>(),
              1e-12 * summary["model_tflops_per_s"].get<double>());
}

// One rank runs out of memory in a step (rank 1 alone, after its first forward pass, then once
// more after its last backward, when its gradient buckets have started): the ranks agree, every
// rank halves its micro-batch and retries the step, and the run follows one process's trajectory.
TEST_F(DataParallel, OutOfMemoryInOneRankFallsBackOnEveryRank) {
  const CliResult one = run_ftune("train --config " + config("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (const std::string where : {"3", "6:backward"}) {
    const std::string run = "oom" + where.substr(0, 1);
    const CliResult two =
        run_ftune_ranks(2, "train --config " + config(run), "FTUNE_DEBUG_OOM_AT_STEP=" + where);
    ASSERT_EQ(two.exit_code, 0) << two.output;
    expect_same("one", run);
    const auto s = nlohmann::json::parse(file_bytes(run_dir(run) + "/summary.json"));
    ASSERT_EQ(s["memory"]["oom_retries"].size(), 1u) << where;
    // Rank 0 fell back too: micro-batches of half the packed tokens, twice as many a step.
    EXPECT_EQ(s["micro_batch_tokens"], s["memory"]["oom_retries"][0]["retried_with"]) << where;
    EXPECT_EQ(s["gradient_accumulation"], 4) << where;
    EXPECT_EQ(s["memory"]["oom_retries"][0]["step"], std::stoi(where)) << where;
    EXPECT_NE(
        s["memory"]["oom_retries"][0]["error"].get<std::string>().find("rank 1 ran out of memory"),
        std::string::npos)
        << s["memory"]["oom_retries"];
  }
}

// A rank that runs out of memory with nothing left to halve (micro-batches of one row) stops
// every rank: rank 0 names rank 1 and the cause, rank 1 gives its own; no summary.
TEST_F(DataParallel, OutOfMemoryWithNothingToHalveStopsEveryRank) {
  CliResult r;
  const double secs = timed_ranks(&r, 2,
                                  "train --config " + config("stopped") +
                                      " training.batch_size=1 training.gradient_accumulation=8",
                                  "FTUNE_DEBUG_OOM_AT_STEP=2:backward");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(secs, 60) << r.output;
  EXPECT_NE(r.output.find("rank 0: error: rank 1 failed in this step: FTUNE_DEBUG_OOM_AT_STEP"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 1: error: FTUNE_DEBUG_OOM_AT_STEP"), std::string::npos) << r.output;
  // They agreed: both said why and ended normally, neither aborted the other.
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run_dir("stopped") + "/summary.json"));
}

// `ftune plan --ranks 2`: each rank's plan covers half the step batch; the reduction's buckets
// and bytes per step are counted (summed in place: no memory of their own).
TEST_F(DataParallel, PlanShowsEachRanksShare) {
  const CliResult one = run_ftune("plan --json --config " + config("plan"), "", Streams::kStdout);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const CliResult two =
      run_ftune("plan --json --ranks 2 --config " + config("plan"), "", Streams::kStdout);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto j1 = nlohmann::json::parse(one.output), j2 = nlohmann::json::parse(two.output);
  EXPECT_EQ(j1["effective_batch"], 8);
  EXPECT_EQ(j2["effective_batch"], 4);
  EXPECT_FALSE(j1.contains("ranks"));
  EXPECT_EQ(j2["ranks"], 2);
  EXPECT_GE(j2["reduction"]["buckets"].get<int64_t>(), 2);  // layers apart from embeddings, head
  EXPECT_EQ(j2["reduction"]["bytes_per_step"].get<int64_t>() % 4, 0);
  EXPECT_EQ(j2["reduction"]["extra_bytes"], 0);
  // The CPU's memory is shared by the machine's ranks.
  EXPECT_NEAR(j2["available_bytes"].get<double>(), j1["available_bytes"].get<double>() / 2,
              j1["available_bytes"].get<double>() * 0.05);
}

// A rank killed mid-run (like kill -9, in step 7 of 8) stops the other; the checkpoint of step 5
// is whole and nothing else was left; the run resumes on 2 ranks bit for bit as if never killed,
// and on 1 process (the world size may change) within float summation order.
TEST_F(DataParallel, KilledRankStopsAllAndTheRunResumes) {
  const CliResult full = run_ftune_ranks(2, "train --config " + config("full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;

  CliResult killed;
  // Each rank computes 2 micro-batches a step: its 13th forward pass is in step 7.
  const double secs = timed_ranks(&killed, 2, "train --config " + config("killed"),
                                  "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=13");
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_LT(secs, 60) << killed.output;
  EXPECT_NE(killed.output.find("137"), std::string::npos) << killed.output;  // rank 1's status
  EXPECT_FALSE(fs::exists(run_dir("killed") + "/summary.json"));
  for (const auto& e : fs::directory_iterator(run_dir("killed") + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find("tmp"), std::string::npos) << e.path();
  ASSERT_TRUE(fs::exists(run_dir("killed") + "/checkpoints/step-0000005"));
  fs::copy(run_dir("killed"), run_dir("one"), fs::copy_options::recursive);

  const CliResult resumed = run_ftune_ranks(2, "train --config " + config("killed") + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical("full", "killed");

  const CliResult one = run_ftune("train --config " + config("one") + " --resume");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("resuming on 1 rank(s); the checkpoint was written by 2"),
            std::string::npos)
      << one.output;
  expect_same("full", "one");
}

// A rank that raises (here: its arena cannot be allocated) stops every rank at once, with its
// rank and cause; rank 0 has written no summary.
TEST_F(DataParallel, RaisingRankStopsAll) {
  CliResult r;
  const double secs =
      timed_ranks(&r, 2, "train --config " + config("failed"), "FTUNE_DEBUG_ARENA_MEMORY=0");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(secs, 60) << r.output;
  EXPECT_NE(r.output.find("ftune: rank 1: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not even a micro-batch"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run_dir("failed") + "/summary.json"));
}

// How docs/data-parallel.md says to stop an mpirun run: the file FTUNE_STOP_FILE names (here in rank 1's
// environment alone, present from the start) stops both ranks after step 1, with its checkpoint
// and rank 0's summary; each rank exits 128 (a stop without a signal), so does mpirun; and the run
// resumes to its end.
TEST_F(DataParallel, StopFileSeenByOneRankStopsEveryRank) {
  const std::string stop = tmp_.path() + "/stop";
  std::ofstream(stop) << "stop\n";
  const CliResult r =
      run_ftune_ranks(2, "train --config " + config("stopped"), "FTUNE_STOP_FILE=" + stop);
  EXPECT_EQ(r.exit_code, 128) << r.output;
  EXPECT_NE(r.output.find("ftune: rank 0: stopped by request at step 1;"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ftune: rank 1: stopped by request at step 1;"), std::string::npos)
      << r.output;
  expect_stopped_with_checkpoint("stopped");
  const CliResult resumed = run_ftune_ranks(2, "train --config " + config("stopped") + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const nlohmann::json s = nlohmann::json::parse(file_bytes(run_dir("stopped") + "/summary.json"));
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["steps"], 8);
}

// A SIGTERM to mpirun: OpenMPI 4.1's mpirun does not pass it on at once; it sends its ranks
// SIGCONT, waits odls_base_sigkill_timeout seconds (default 1), sends SIGTERM, waits as long again
// and sends SIGKILL. A rank whose stop takes longer (here 2 s, FTUNE_DEBUG_STOP_DELAY_MS, as a
// large model's checkpoint write) was killed without its checkpoint or summary; with the timeout
// raised (docs/data-parallel.md: --mca odls_base_sigkill_timeout, here 8 s) every rank stops at one step boundary
// with the checkpoint and summary and exits 143 (128 + SIGTERM). The run logs little: once mpirun
// has its SIGTERM it reads no more of its ranks' output until they exit, so a rank's last lines
// get through only while its pipe has room (UnreadOutput covers a rank whose pipe is full).
TEST_F(DataParallel, SigtermToMpirunStopsEveryRankWhenTheKillTimeoutAllowsIt) {
  const std::string log = tmp_.path() + "/mpirun.log";
  const pid_t mpirun = spawn_ftune_ranks(
      2,
      "train --config " + config("term") +
          " training.epochs=100 training.log_every=100 eval.every_steps=100",
      log,
      "OMPI_MCA_odls_base_sigkill_timeout=8 FTUNE_DEBUG_STOP_DELAY_MS=2000");
  ASSERT_GT(mpirun, 0);
  const bool started = wait_for_text(log, "checkpoint ", 120);  // step 100's, by rank 0
  if (started) kill(mpirun, SIGTERM);
  int status = -1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (waitpid(mpirun, &status, WNOHANG) == 0) {
    if (!started || std::chrono::steady_clock::now() > end) {  // never hang the suite
      kill(-mpirun, SIGKILL);
      waitpid(mpirun, &status, 0);
      FAIL() << (started ? "mpirun did not end within 120 s of SIGTERM\n" : "no checkpoint\n")
             << file_bytes(log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string out = file_bytes(log);
  EXPECT_NE(out.find("ftune: rank 0: stopped by signal 15 at step "), std::string::npos) << out;
  EXPECT_NE(out.find("ftune: rank 1: stopped by signal 15 at step "), std::string::npos) << out;
  expect_stopped_with_checkpoint("term");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;  // OpenMPI 4.1: 1
}

}  // namespace
}  // namespace ftune::test
