// The run loop's state, shared by the files that implement it (internal to train/: trainer.cc
// orders the run and its steps, trainer_checkpoint.cc saves and restores it, trainer_summary.cc
// reports it). How a step is computed is the step strategy's (train/step_strategy.h); the run
// loop owns the data cursor, the schedule, evaluation and early stopping, checkpoints, signals,
// logging, the progress bar, publishing and the summary. Its state is in three parts besides the
// run's setup: what a resume restores (TrainerResumeState), the open logging window
// (TrainerLogWindow) and what the run writes and shows (TrainerOutputs).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include "cuda/nvml.h"
#include "data/batcher.h"
#include "data/prefetcher.h"
#include "dist/gradient_reducer.h"
#include "io/dir_lock.h"
#include "models/hf_checkpoint.h"
#include "optim/lr_schedule.h"
#include "optim/step_scalars.h"
#include "train/batch_plan.h"
#include "train/checkpoint_store.h"
#include "train/debug_hooks.h"
#include "train/early_stopping.h"
#include "train/group_sampler.h"
#include "train/progress.h"
#include "train/run_log.h"
#include "train/step_strategy.h"
#include "train/trainer.h"

namespace ftune {

using RunClock = std::chrono::steady_clock;

inline double seconds_since(RunClock::time_point t) {
  return std::chrono::duration<double>(RunClock::now() - t).count();
}

// The run's resumable counters: what trainer_state.json saves and a resume restores
// (train/trainer_checkpoint.cc). `step` is the data cursor; `micro_batches` counts forward passes
// (fault injection, reports).
struct TrainerResumeState {
  int64_t step = 0, micro_batches = 0, samples = 0, tokens = 0, skipped = 0, nonfinite_in_row = 0;
  double train_seconds = 0, wait_seconds = 0;
  nlohmann::json best_eval, last_eval;
  // "completed", or what stopped the run early ("early_stopping", "hook"): a resumed run that
  // had stopped does not train on.
  std::string stopped_by = "completed";
};

// The logging window: the steps since the last logged line (its loss sum is on the device:
// kWindowLoss). Its counts and seconds are saved in checkpoints, so the first line logged after a
// resume is the uninterrupted run's.
struct TrainerLogWindow {
  int64_t steps = 0, samples = 0, tokens = 0;
  RunClock::time_point start = RunClock::now();
  double restored_seconds = 0;  // the window's training time before the resume
  // The window's input wait (timing, like its seconds: not checkpointed) and the GPU sampler's
  // utilisation sum and count at the window's start (the interval's mean is their difference).
  double wait_seconds = 0;
  double util_sum = 0;
  int64_t util_samples = 0;
  double shown_loss = 0;  // the progress bar's loss: the last logged window's mean
};

// What the run writes and shows as it goes: the checkpoints (rank 0's; every rank reads them when
// resuming), metrics.jsonl and TensorBoard events (rank 0's), the GPU sampler and the progress bar.
struct TrainerOutputs {
  std::unique_ptr<CheckpointStore> store;
  std::unique_ptr<RunLog> log;
  // GPU runs: NVML utilisation / memory / power sampling (progress bar, summary.json "gpu").
  // Declared before progress, which calls it, so it outlives the bar.
  std::unique_ptr<cuda::NvmlSampler> gpu_sampler;
  std::unique_ptr<ProgressBar> progress;
};

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, const TrainOptions& options)
      : cfg_(cfg),
        tc_(cfg.training),
        options_(options),
        run_(cfg.output.dir),
        hooks_(DebugHooks::from_env()) {}

  nlohmann::json run();

 private:
  // trainer.cc: setup, the loop, evaluation and publishing.
  void load_data_and_model();
  void plan_batch();  // the run's memory plan: micro-batch, accumulation and checkpointing
  void plan_schedule();
  void train_step();  // fetches the step batch, runs the strategy's step, logs
  void add_gpu_interval(nlohmann::json& line);  // the log interval's GPU figures
  nlohmann::json run_eval(const TokenizedSplit& split, const char* name);
  // A causal LM's evaluation (model.task causal_lm): loss and perplexity per completion token.
  nlohmann::json run_lm_eval(const TokenizedSplit& split, const char* name,
                             RunClock::time_point t0);
  void publish_selected(const CheckpointEntry& chosen, const std::string& model_dir);
  // The end of a run with output.save_model false: the test split, the summary, no model.
  nlohmann::json finish_without_model();
  // trainer_checkpoint.cc
  void restore(const CheckpointEntry& ckpt);
  void save_checkpoint(bool best);
  void write_checkpoint(const std::string& dir, const StepScalarValues& scalars);
  void load_weights_from(const std::string& checkpoint);  // model or adapter of a checkpoint
  // The host's read of the step scalars: updates the skip counters, warns about skipped steps and
  // throws when the device latched the non-finite abort.
  StepScalarValues sync_step_scalars();
  // trainer_summary.cc
  // The micro-batches every rank computed (collective: every rank calls it at the same point).
  TrainingWork work_over_ranks() const;
  // `work`: work_over_ranks(), for FLOPs and MFU.
  nlohmann::json summary(const std::string& status, const TrainingWork& work) const;

  int64_t epoch_of(int64_t step) const { return step / steps_per_epoch_; }
  SequenceClassifier& clf() const { return strategy_->model(); }
  // Data-parallel runs: only rank 0 writes the run's files (logs, metrics, checkpoints, summary,
  // the published model); the other ranks compute and write nothing but their own errors.
  bool lead() const { return group_->lead(); }
  void log_line(const nlohmann::json& line) {
    if (outputs_.log) outputs_.log->write(line);
    if (lead() && options_.on_log) options_.on_log(line);
  }

  // The run directory's lock (io/dir_lock.h): taken before anything there is read or written,
  // released last (declared first, destroyed last).
  std::optional<io::DirLock> lock_;
  const TrainConfig& cfg_;
  const TrainConfig::Training& tc_;
  TrainOptions options_;
  std::filesystem::path run_;
  const DebugHooks hooks_;  // fault injection, read once
  RunClock::time_point t_start_ = RunClock::now();

  std::optional<text::Tokenizer> tok_;
  TrainData data_;
  ModelSpec model_;  // the model's family and config (models/backbone.h), with the task's labels
  LoadReport load_report_;
  RunBatchPlan plan_;
  LossOptions loss_options_;
  int32_t pad_id_ = 0;
  // data.max_length clipped to the model's positions: Tv of the dropout streams (a run constant)
  // and the planner's worst-case sequence length.
  int64_t stream_seq_ = 0;
  ProcessGroup* group_ = nullptr;             // the ranks (one without a launcher)
  std::unique_ptr<GradientReducer> reducer_;  // data-parallel runs: the sum over the ranks
  std::unique_ptr<StepStrategy> strategy_;    // how a step is computed: the model and optimizer

  std::unique_ptr<data::LengthBucketedBatcher> batcher_;  // step batches of effective_ rows
  std::unique_ptr<GroupSampler> sampler_;  // training.loss listwise: step batches of whole groups
  int64_t effective_ = 1, steps_per_epoch_ = 1, total_steps_ = 0;
  LrSchedule schedule_;
  std::unique_ptr<data::BatchPrefetcher> prefetch_;  // step batches assembled ahead of the step
  Batch step_batch_;                                 // the batch of step step_batch_of_
  int64_t step_batch_of_ = -1;

  std::unique_ptr<EarlyStopping> early_;
  std::string eval_metric_;
  TrainerOutputs outputs_;
  int64_t samples_at_start_ = 0, tokens_at_start_ = 0;

  TrainerResumeState state_;  // what a resume restores
  TrainerLogWindow window_;   // the open logging interval
  const int64_t step_scalar_reads_at_start_ = step_scalar_reads();
  const int64_t host_scalar_reads_at_start_ = host_scalar_reads();
  int64_t saved_step_ = -1;
};

}  // namespace ftune
