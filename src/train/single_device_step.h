// The single-device step strategy (train/step_strategy.h): one process, one device (the CPU or one
// GPU), a data-parallel rank being one such process. It owns the arena that holds the model,
// AdamW and the staged inputs, planned once for the run's micro-batch, and steps as a sequence of
// jobs, each in its own file:
//   micro-batch passes  the step batch cut into contiguous micro-batches, their inputs staged,
//                       forward and backward with the gradients accumulated, CUDA graphs where on
//                       (train/micro_batch_pass.h, train/step_graphs.h);
//   gradient sync       nothing on one process; on data-parallel ranks this rank's rows only and
//                       the gradients and step loss summed over the ranks, overlapping the last
//                       backward (train/gradient_sync.h over dist/gradient_reducer.h);
//   optimizer tail      clipping, the non-finite skip, AdamW and fp16's loss scale
//                       (train/optimizer_tail.h);
// with the tests' fault injection at named points of the passes (train/debug_hooks.h StepFaults).
// When an allocation fails it halves the micro-batch and rebuilds the arena with the trained state
// kept (same effective batch, same trajectory).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/gpu_paths.h"
#include "dist/gradient_reducer.h"
#include "models/backbone.h"
#include "train/batch_plan.h"
#include "train/debug_hooks.h"
#include "train/gradient_sync.h"
#include "train/input_staging.h"
#include "train/optimizer_tail.h"
#include "train/precision.h"
#include "train/step_graphs.h"
#include "train/step_strategy.h"

namespace ftune {

class SingleDeviceStep : public StepStrategy {
 public:
  // `model` has the task's labels and dropout and outlives the strategy, as do `config` and
  // `hooks`; `plan` is the run's memory plan (its choice: the first micro-batch and
  // checkpointing); `stream_seq` is Tv of the dropout streams (data.max_length clipped to the
  // model). Builds the model and optimizer in their arena (an allocation failure halves the
  // micro-batch); the weights are the loader's to fill. `reducer` (data-parallel runs, outlives
  // the strategy; dist/gradient_reducer.h): the step's gradient sync is over the ranks
  // (train/gradient_sync.h RankGradientSync): this rank computes only its rows of each step batch
  // and the gradients and step loss are summed over the ranks before the optimizer tail.
  SingleDeviceStep(const TrainConfig& config, const ModelSpec& model, const RunBatchPlan& plan,
                   int64_t stream_seq, const LossOptions& loss, const DebugHooks& hooks,
                   GradientReducer* reducer = nullptr);

  SequenceClassifier& model() override { return *clf_; }
  AdamW& optimizer() override { return *adamw_; }
  LossScaler& loss_scaler() override { return scaler_; }

  void prepare_batch(Batch& step_batch) const override;
  StepOutcome step(const Batch& step_batch, const StepRequest& request) override;
  void recover(const OutOfMemoryError& e, int64_t step) override;

  void set_micro_batch(int64_t rows, int64_t step) override;
  int64_t micro_batch() const override { return micro_batch_; }
  int64_t micro_tokens() const override { return micro_tokens_; }
  int64_t max_batch() const override { return clf_->options().max_batch; }
  int64_t accumulation() const override;
  int64_t eval_batch() const override { return eval_batch_; }
  int64_t eval_tokens() const override { return eval_tokens_; }
  InputStaging* eval_staging() override { return staging_.get(); }
  GradientCheckpointing checkpointing() const override { return checkpointing_; }
  const TrainingWork& work() const override { return work_; }

  void sample_device_memory() override;
  nlohmann::json report() const override;

 private:
  void build();  // the model and optimizer over one arena (an allocation failure halves)
  // This process's rows of the step batch, cut into micro-batches (rows [row0, row0 + rows)).
  std::vector<std::pair<int64_t, int64_t>> micro_batch_cuts_of(const Batch& step_batch) const;
  void after_first_step();  // GPU runs: the GEMM autotune's report and cache
  // The micro-batch size in the planner's unit (rows, or packed tokens), whether it can halve,
  // halving it, and how the log names it.
  int64_t plan_unit() const { return micro_tokens_ > 0 ? micro_tokens_ : micro_batch_; }
  bool can_halve() const;
  int64_t halved() const;
  void set_plan_unit(int64_t m);
  std::string unit_text(int64_t m) const;
  BatchLayout layout() const {
    return micro_tokens_ > 0 ? BatchLayout::Packed : BatchLayout::Padded;
  }

  const TrainConfig& cfg_;
  const TrainConfig::Training& tc_;
  const ModelSpec& model_;
  const RunBatchPlan plan_;
  const int64_t stream_seq_;
  const LossOptions loss_;
  const DebugHooks& hooks_;
  const std::unique_ptr<GradientSync> sync_;  // local, or the sum over the ranks
  const int64_t effective_;                   // rows this process computes per step (at most)
  const int32_t pad_id_;

  ResolvedTf32 tf32_;             // TF32 for the fp32 GEMMs (a GPU setting)
  ResolvedCudaGraphs cuda_graphs_;  // training.cuda_graphs for the run's device
  PadRule pad_;                     // training.pad_to_multiple_of, resolved
  const GpuPathCounts gpu_paths_at_start_ = gpu_path_counts();  // summary.json "gpu_paths"
  LossScaler scaler_;               // fp16: dynamic loss scaling (disabled otherwise: S = 1)
  GradientCheckpointing checkpointing_ = GradientCheckpointing::Off;
  int64_t micro_batch_ = 1;   // rows per forward pass; set_micro_batch() changes it between steps
  int64_t micro_tokens_ = 0;  // packed: the token budget of one (micro_batch_ bounds its rows)
  int64_t eval_batch_ = 0, eval_tokens_ = 0;

  std::unique_ptr<SequenceClassifier> clf_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<InputStaging> staging_;  // double-buffered micro-batch inputs
  std::unique_ptr<StepGraphs> graphs_;     // the micro-batch graphs (GPU runs with graphs on)
  std::unique_ptr<OptimizerTail> tail_;    // over clf_ and adamw_
  std::unique_ptr<Arena> arena_;
  std::vector<int32_t> positions_;  // position ids of the step batch
  nlohmann::json oom_retries_ = nlohmann::json::array();
  size_t free_before_run_ = 0, min_free_ = SIZE_MAX;  // device memory (GPU runs)
  TrainingWork work_;
};

}  // namespace ftune
