// The run loop's state, shared by the files that implement it (internal to train/: trainer.cc
// orders the run and its steps, trainer_checkpoint.cc saves and restores it, trainer_summary.cc
// reports it). How a step is computed is the step strategy's (train/step_strategy.h); the run
// loop owns the data cursor, the schedule, evaluation and early stopping, checkpoints, signals,
// logging, the progress bar, publishing and the summary.
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
  void publish_selected(const CheckpointEntry& chosen, const std::string& model_dir);
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
    if (log_) log_->write(line);
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
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<RunLog> log_;
  std::string eval_metric_;
  // GPU runs: NVML utilisation / memory / power sampling (progress bar, summary.json "gpu").
  // Declared before progress_, which calls it, so it outlives the bar.
  std::unique_ptr<cuda::NvmlSampler> gpu_sampler_;
  std::unique_ptr<ProgressBar> progress_;
  int64_t samples_at_start_ = 0, tokens_at_start_ = 0;

  // Resumable state (trainer_state.json).
  // step_ is the data cursor; micro_batches_ counts forward passes (fault injection, reports).
  int64_t step_ = 0, micro_batches_ = 0, samples_ = 0, tokens_ = 0, skipped_ = 0,
          nonfinite_in_row_ = 0;
  double train_seconds_ = 0, wait_seconds_ = 0;
  nlohmann::json best_eval_, last_eval_;
  // "completed", or what stopped the run early ("early_stopping", "hook"): a resumed run that
  // had stopped does not train on.
  std::string stopped_by_ = "completed";

  // Logging window (its loss sum is on the device: kWindowLoss). Saved in checkpoints, so the
  // first line logged after a resume is the uninterrupted run's.
  int64_t window_steps_ = 0, window_samples_ = 0, window_tokens_ = 0;
  RunClock::time_point window_start_ = RunClock::now();
  double window_restored_seconds_ = 0;  // the window's training time before the resume
  // The window's input wait (timing, like its seconds: not checkpointed) and the GPU sampler's
  // utilisation sum and count at the window's start (the interval's mean is their difference).
  double window_wait_seconds_ = 0;
  double window_util_sum_ = 0;
  int64_t window_util_samples_ = 0;
  double shown_loss_ = 0;  // the progress bar's loss: the last logged window's mean
  const int64_t step_scalar_reads_at_start_ = step_scalar_reads();
  const int64_t host_scalar_reads_at_start_ = host_scalar_reads();
  int64_t saved_step_ = -1;
};

}  // namespace ftune
