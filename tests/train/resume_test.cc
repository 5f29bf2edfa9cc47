// Checkpoints and exact resume through the CLI: a run killed (like kill -9) at an epoch boundary,
// mid-epoch and mid-gradient-accumulation, between its final checkpoint and its summary, or
// stopped by SIGTERM, then resumed with --resume, gives bit-identical per-step losses, logged
// windows, evaluations and final weights to an uninterrupted run; a checkpoint that cannot be
// written leaves no partial directory.
// Resume refuses changed data or configuration; early stopping, retention, the output directory
// guard and the non-finite step policy behave as documented: an injected non-finite step is
// skipped with weights and moments untouched (bit for bit the run that stopped before it), a run
// of them aborts at the next host read with the same message, and between logging intervals the
// host reads nothing from the device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

namespace fs = std::filesystem;

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.path() + "/tiny";
    write_tiny_bert(model_);
    write_pair_task(tmp_.path() + "/train.jsonl", 128, 1);  // 16 micro-batches of 8 per epoch
    write_pair_task(tmp_.path() + "/val.jsonl", 32, 2);
  }
  // 2 epochs, micro-batch 8, accumulation 2: 16 steps; evaluation (and checkpoint) every 3 steps
  // and at each epoch end (step 8); dropout on.
  std::string config(const std::string& run, const std::string& extra = "") {
    const std::string path = tmp_.path() + "/" + run + ".yaml";
    std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                        << "/train.jsonl\n  validation: " << tmp_.path()
                        << "/val.jsonl\n  max_length: 24\n"
                        << "training:\n  epochs: 2\n  batch_size: 8\n  gradient_accumulation: 2\n"
                        << "  learning_rate: 3.0e-3\n  log_every: 1\n  threads: 2\n"
                        << "eval:\n  every_steps: 3\n"
                        << "checkpoint:\n  keep_last: 20\n"
                        << extra << "output:\n  dir: " << tmp_.path() << "/" << run << "\n"
                        << "  progress: plain\n";
    return path;
  }
  std::string run_dir(const std::string& run) { return tmp_.path() + "/" + run; }

  void expect_identical(const std::string& a, const std::string& b) {
    EXPECT_EQ(logged_metrics(run_dir(a)), logged_metrics(run_dir(b)));
    const std::string wa = file_bytes(run_dir(a) + "/model/model.safetensors");
    ASSERT_FALSE(wa.empty());
    EXPECT_TRUE(wa == file_bytes(run_dir(b) + "/model/model.safetensors"))
        << "final weights differ";
    auto sa = nlohmann::json::parse(file_bytes(run_dir(a) + "/summary.json"));
    auto sb = nlohmann::json::parse(file_bytes(run_dir(b) + "/summary.json"));
    sa["best_eval"].erase("seconds");
    sb["best_eval"].erase("seconds");
    EXPECT_EQ(sa["steps"], sb["steps"]);
    EXPECT_EQ(sa["best_eval"].dump(), sb["best_eval"].dump());
  }
  TempDir tmp_;
  std::string model_;
};

TEST_F(Resume, KilledRunsResumeBitExactly) {
  const CliResult full = run_ftune("train --config " + config("full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto summary = nlohmann::json::parse(file_bytes(run_dir("full") + "/summary.json"));
  EXPECT_EQ(summary["steps"], 16);
  EXPECT_EQ(summary["status"], "completed");

  // Micro-batch 16 starts epoch 1 (checkpoint at step 8, the epoch end); micro-batch 13 is
  // mid-epoch (checkpoint at step 6); micro-batch 19 is the second half of step 10
  // (mid-accumulation, checkpoint at step 9).
  for (const int micro : {16, 13, 19}) {
    const std::string run = "killed" + std::to_string(micro);
    const CliResult killed = run_ftune("train --config " + config(run),
                                       "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=" + std::to_string(micro));
    EXPECT_EQ(killed.exit_code, 137) << killed.output;
    EXPECT_FALSE(fs::exists(run_dir(run) + "/summary.json"));
    const CliResult resumed = run_ftune("train --config " + config(run) + " --resume");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
    SCOPED_TRACE(run);
    expect_identical("full", run);
  }
}

TEST_F(Resume, FinishesARunKilledAfterItsFinalCheckpoint) {
  // Killed between the final checkpoint (step 16, after its validation) and summary.json: the
  // resumed run trains nothing, evaluates the test split, publishes model/ and writes the
  // summary, as the uninterrupted run did.
  const std::string test = " data.test=" + tmp_.path() + "/val.jsonl";
  ASSERT_EQ(run_ftune("train --config " + config("full") + test).exit_code, 0);
  const CliResult killed =
      run_ftune("train --config " + config("fin") + test, "FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT=16");
  ASSERT_EQ(killed.exit_code, 137) << killed.output;
  EXPECT_FALSE(fs::exists(run_dir("fin") + "/summary.json"));
  EXPECT_FALSE(fs::exists(run_dir("fin") + "/model"));
  const CliResult resumed = run_ftune("train --config " + config("fin") + test + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical("full", "fin");
  const auto s = nlohmann::json::parse(file_bytes(run_dir("fin") + "/summary.json"));
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["test"]["rows"], 32);
  EXPECT_EQ(s["model_step"],
            nlohmann::json::parse(file_bytes(run_dir("full") + "/summary.json"))["model_step"]);

  // An early-stopped run killed after its last checkpoint stops again at the same step instead
  // of training on (patience 2, min_delta 1: stops at step 8).
  const std::string es = "early_stopping:\n  patience: 2\n  min_delta: 1.0\n";
  ASSERT_EQ(run_ftune("train --config " + config("es_full", es)).exit_code, 0);
  ASSERT_EQ(run_ftune("train --config " + config("es", es), "FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT=8")
                .exit_code,
            137);
  const CliResult es_resumed = run_ftune("train --config " + config("es", es) + " --resume");
  ASSERT_EQ(es_resumed.exit_code, 0) << es_resumed.output;
  const auto es_summary = nlohmann::json::parse(file_bytes(run_dir("es") + "/summary.json"));
  EXPECT_EQ(es_summary["status"], "early_stopping");
  EXPECT_EQ(es_summary["steps"], 8);
  expect_identical("es_full", "es");
}

TEST_F(Resume, LoggedWindowIsExactAfterAResumeOffItsBoundary) {
  // Logging every 4 steps, resumed from the checkpoint of step 6 (micro-batch 13 is step 7's):
  // the first train line after the resume (step 8) averages steps 5-8, as without the kill.
  const std::string log4 = " training.log_every=4";
  ASSERT_EQ(run_ftune("train --config " + config("full") + log4).exit_code, 0);
  ASSERT_EQ(run_ftune("train --config " + config("w") + log4, "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=13")
                .exit_code,
            137);
  const auto state = nlohmann::json::parse(
      file_bytes(run_dir("w") + "/checkpoints/step-0000006/trainer_state.json"));
  EXPECT_EQ(state["window"]["steps"], 2) << state["window"].dump();
  const CliResult resumed = run_ftune("train --config " + config("w") + log4 + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical("full", "w");  // metrics.jsonl line for line (timing fields aside)
  EXPECT_EQ(logged_train_losses(run_dir("full")), logged_train_losses(run_dir("w")));
}

TEST_F(Resume, FailedCheckpointWriteLeavesNoPartialDirectory) {
  // A 1 MiB file-size limit (SIGXFSZ ignored, so writes fail with EFBIG as on a full disk): the
  // first checkpoint's model.safetensors (4 MB) cannot be written. The run fails naming the
  // file, and neither the partial checkpoint nor a half-published model stays behind.
  const CliResult r =
      run_ftune("train --config " + config("full"), "ulimit -f 2048; trap '' XFSZ;");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(run_dir("full")))
    if (e.path().filename().string().find("tmp") != std::string::npos)
      left.push_back(e.path().string());
  EXPECT_TRUE(left.empty()) << left.front();
  EXPECT_FALSE(fs::exists(run_dir("full") + "/checkpoints/step-0000003"));
}

TEST_F(Resume, SigtermSavesAndResumes) {
  ASSERT_EQ(run_ftune("train --config " + config("full")).exit_code, 0);
  const CliResult stopped =
      run_ftune("train --config " + config("term"), "FTUNE_DEBUG_SIGTERM_AT_STEP=5");
  EXPECT_EQ(stopped.exit_code, 128 + 15) << stopped.output;
  EXPECT_NE(stopped.output.find("--resume"), std::string::npos) << stopped.output;
  const auto summary = nlohmann::json::parse(file_bytes(run_dir("term") + "/summary.json"));
  EXPECT_EQ(summary["status"], "interrupted");
  EXPECT_TRUE(fs::exists(run_dir("term") + "/checkpoints/step-0000005/model.safetensors"));
  ASSERT_EQ(run_ftune("train --config " + config("term") + " --resume").exit_code, 0);
  expect_identical("full", "term");
}

TEST_F(Resume, RefusesChangedDataOrConfig) {
  const CliResult killed =
      run_ftune("train --config " + config("r"), "FTUNE_DEBUG_EXIT_AT_MICRO_STEP=10");
  ASSERT_EQ(killed.exit_code, 137) << killed.output;
  const CliResult lr =
      run_ftune("train --config " + config("r") + " --resume training.learning_rate=1.0e-3");
  EXPECT_EQ(lr.exit_code, 2);
  EXPECT_NE(lr.output.find("the configuration"), std::string::npos) << lr.output;
  std::ofstream(tmp_.path() + "/val.jsonl", std::ios::app)
      << R"({"text": "the red car", "text_pair": "good", "label": 1})"
      << "\n";
  const CliResult data = run_ftune("train --config " + config("r") + " --resume");
  EXPECT_EQ(data.exit_code, 2);
  EXPECT_NE(data.output.find("the data file " + tmp_.path() + "/val.jsonl changed"),
            std::string::npos)
      << data.output;
  const CliResult nothing = run_ftune("train --config " + config("none") + " --resume");
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_NE(nothing.output.find("no checkpoint to resume from"), std::string::npos);
}

TEST_F(Resume, OutputDirectoryIsNotClobbered) {
  ASSERT_EQ(run_ftune("train --config " + config("a") + " training.max_steps=2").exit_code, 0);
  const CliResult again = run_ftune("train --config " + config("a") + " training.max_steps=2");
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.output.find("already holds a run"), std::string::npos) << again.output;
  const CliResult over =
      run_ftune("train --config " + config("a") + " training.max_steps=2 output.overwrite=true");
  EXPECT_EQ(over.exit_code, 0) << over.output;
}

TEST_F(Resume, EarlyStoppingAndRetentionKeepTheBest) {
  // min_delta 1 on macro-F1 can never be met after the first evaluation: patience 2 stops the
  // run at the third evaluation (step 8: evaluations at 3, 6, 8).
  const CliResult r = run_ftune("train --config " +
                                config("es", "early_stopping:\n  patience: 2\n  min_delta: 1.0\n") +
                                " checkpoint.keep_last=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = nlohmann::json::parse(file_bytes(run_dir("es") + "/summary.json"));
  EXPECT_EQ(s["status"], "early_stopping");
  EXPECT_EQ(s["steps"], 8);
  EXPECT_EQ(s["model_step"], 3);
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(run_dir("es") + "/checkpoints"))
    if (e.is_directory()) dirs.push_back(e.path().filename().string());
  std::sort(dirs.begin(), dirs.end());
  EXPECT_EQ(dirs, (std::vector<std::string>{"step-0000003", "step-0000008"}));
  const auto index = nlohmann::json::parse(file_bytes(run_dir("es") + "/checkpoints/index.json"));
  EXPECT_EQ(index["best_step"], 3);
  EXPECT_TRUE(fs::exists(run_dir("es") + "/model/tokenizer.json"));
}

TEST_F(Resume, NonFiniteStepsAreSkippedThenAbort) {
  const CliResult r = run_ftune("train --config " + config("nan") +
                                " training.learning_rate=1.0e+30 training.max_grad_norm=1.0e+30 "
                                "training.warmup_ratio=0 training.max_nonfinite_steps=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("update skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 consecutive steps with non-finite loss or gradients"),
            std::string::npos)
      << r.output;
}

TEST_F(Resume, InjectedNonFiniteStepIsSkippedWithWeightsAndMomentsUntouched) {
  // Constant LR: steps 1-2 are the same in both runs; "skip" has a NaN loss at step 3.
  const std::string common = " training.schedule=constant training.warmup_ratio=0";
  const CliResult skip = run_ftune(
      "train --config " + config("skip") + common + " training.max_steps=3",
      "FTUNE_DEBUG_NONFINITE_STEPS=3");
  ASSERT_EQ(skip.exit_code, 0) << skip.output;
  const CliResult two = run_ftune("train --config " + config("two") + common +
                                  " training.max_steps=2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(skip.output.find("update skipped"), std::string::npos) << skip.output;
  const auto s = nlohmann::json::parse(file_bytes(run_dir("skip") + "/summary.json"));
  EXPECT_EQ(s["skipped_steps"], 1);
  EXPECT_EQ(s["steps"], 3);
  const auto state = nlohmann::json::parse(
      file_bytes(run_dir("skip") + "/checkpoints/step-0000003/trainer_state.json"));
  EXPECT_EQ(state["optimizer_steps"], 2);
  EXPECT_EQ(state["skipped_steps"], 1);
  EXPECT_EQ(state["nonfinite_in_row"], 1);
  // Weights and moments after the skipped step 3 are those after step 2, bit for bit.
  const std::string w = file_bytes(run_dir("skip") + "/checkpoints/step-0000003/model.safetensors");
  ASSERT_FALSE(w.empty());
  EXPECT_TRUE(w == file_bytes(run_dir("two") + "/checkpoints/step-0000002/model.safetensors"));
  const std::string o =
      file_bytes(run_dir("skip") + "/checkpoints/step-0000003/optimizer.safetensors");
  ASSERT_FALSE(o.empty());
  EXPECT_TRUE(o == file_bytes(run_dir("two") + "/checkpoints/step-0000002/optimizer.safetensors"));
  // The logged losses of steps 1-2 are the same; step 3's is not finite (null in JSON).
  const auto ls = logged_metrics(run_dir("skip")), lt = logged_metrics(run_dir("two"));
  ASSERT_GE(ls.size(), 2u);
  EXPECT_EQ(ls[0], lt[0]);
}

TEST_F(Resume, NonFiniteRunAbortsAtTheNextReadWithTheSameMessage) {
  // Non-finite from step 2 on, limit 3: reached at step 4, seen at the log read of step 5.
  const CliResult r = run_ftune("train --config " + config("nanrun") +
                                    " training.max_nonfinite_steps=3 training.log_every=5",
                                "FTUNE_DEBUG_NONFINITE_STEPS=2-100");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("3 consecutive steps with non-finite loss or gradients "
                          "(training.max_nonfinite_steps); stopping at step 4"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("update skipped"), std::string::npos) << r.output;
}

TEST_F(Resume, NoHostReadsBetweenLoggingIntervals) {
  // No validation split: the only reads are the step scalars at each log line (steps 5, 10, 15)
  // and at the final checkpoint; no per-step loss or norm read, no single-value read at all.
  const std::string path = tmp_.path() + "/reads.yaml";
  std::ofstream(path) << "model:\n  path: " << model_ << "\ndata:\n  train: " << tmp_.path()
                      << "/train.jsonl\n  max_length: 24\n"
                      << "training:\n  max_steps: 15\n  batch_size: 4\n  gradient_accumulation: 4\n"
                      << "  learning_rate: 3.0e-3\n  log_every: 5\n  threads: 2\n"
                      << "output:\n  dir: " << run_dir("reads") << "\n  progress: plain\n";
  const CliResult r = run_ftune("train --config " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = nlohmann::json::parse(file_bytes(run_dir("reads") + "/summary.json"));
  EXPECT_EQ(s["steps"], 15);
  EXPECT_EQ(s["host_reads"]["step_scalars"], 4) << s["host_reads"].dump();
  EXPECT_EQ(s["host_reads"]["scalars"], 0) << s["host_reads"].dump();
  EXPECT_EQ(logged_metrics(run_dir("reads")).size(), 3u);
  // The GPU path counters are there on the CPU too, all zero (the same summary on every device).
  const auto& p = s["gpu_paths"];
  for (const char* k : {"fused", "plain", "unfused_epilogue", "naive"})
    EXPECT_EQ(p["gemm"][k], 0) << p.dump();
  EXPECT_EQ(p["attention"]["cudnn"], 0) << p.dump();
  EXPECT_EQ(p["cudnn_plans"]["builds"], 0) << p.dump();
  EXPECT_EQ(p["cuda_graphs"]["captures"], 0) << p.dump();
  EXPECT_EQ(p["deterministic"], true) << p.dump();
}

}  // namespace
}  // namespace ftune::test
