// The step strategy: how one optimizer step is computed from a step batch, apart from the run
// loop that orders steps (train/trainer.cc: the data cursor, evaluation, checkpoints, signals,
// logging, publishing and the summary). A strategy owns this process's model and optimizer state
// and everything that depends on where and how a step runs: the arena, micro-batches and gradient
// accumulation, the out-of-memory fallback, CUDA graphs, input staging and fp16 loss scaling.
//
// One strategy computes every run today: the single-device step (train/single_device_step.h), one
// process on one device. Data parallel (issue 20) is not a strategy of its own but that step with
// a gradient sync over the ranks (train/gradient_sync.h): every rank receives the same global step
// batch, computes its contiguous row range with loss shares and dropout indices taken over the
// global batch, and sums the gradients and the step loss before the optimizer tail (so clipping
// and non-finite skipping agree on every rank); it keeps a full replica, so model() and
// optimizer() still answer for evaluation and checkpoints. The run loop never learns how many
// devices computed a step. A strategy that steps differently (another device layout, sharded
// optimizer state) implements this interface beside it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "data/batch.h"
#include "models/sequence_classifier.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "train/flops.h"
#include "train/input_staging.h"

namespace ftune {

struct StepRequest {
  int64_t step = 0;           // 0-based optimizer step: the data cursor and dropout's offset
  double lr = 0;              // the scheduled learning rate of this step
  int64_t micro_batches = 0;  // forward passes of the run before this step (fault injection)
};

struct StepOutcome {
  int64_t micro_batches = 0;  // forward passes this step computed
  // fp16: a loss-scale overflow skipped the step; the skipped-step count after it, so the run
  // loop does not report that skip again as a non-finite step.
  std::optional<int64_t> skipped_steps;
};

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;

  // The model and optimizer this process trains (a full replica on every rank): weights are
  // loaded into, evaluated, saved and published from model(); the optimizer's moments and step
  // scalars (optim/step_scalars.h, the same on every rank) are checkpointed from optimizer().
  virtual SequenceClassifier& model() = 0;
  virtual AdamW& optimizer() = 0;
  virtual LossScaler& loss_scaler() = 0;

  // Lays a freshly fetched step batch out for this strategy's inputs (padding to the shapes its
  // kernels want); once per batch: a retried step keeps it.
  virtual void prepare_batch(Batch& step_batch) const = 0;
  // One optimizer step over the whole step batch: forward and backward over its micro-batches,
  // gradient norm and clipping, the non-finite check and AdamW, all on the device. Throws
  // OutOfMemoryError when an allocation fails part-way; recover() then readies the retry of the
  // same step on the same batch.
  virtual StepOutcome step(const Batch& step_batch, const StepRequest& request) = 0;
  // Halves the micro-batch and rebuilds what depends on it, the trained state kept; throws
  // OutOfMemoryError when nothing is left to halve. `step` is the step being retried (0-based).
  virtual void recover(const OutOfMemoryError& e, int64_t step) = 0;

  // Micro-batches of `rows` rows (1 to max_batch()) from step `step` (0-based) on; the effective
  // batch, and so the trajectory, stay the same.
  virtual void set_micro_batch(int64_t rows, int64_t step) = 0;
  virtual int64_t micro_batch() const = 0;   // rows per forward pass (packed: at most)
  virtual int64_t micro_tokens() const = 0;  // packed: the token budget of one (0: padded)
  virtual int64_t max_batch() const = 0;     // the rows the arena is planned for
  virtual int64_t accumulation() const = 0;  // micro-batches per step (packed: at most)
  virtual int64_t eval_batch() const = 0;   // rows of an evaluation batch (packed: at most)
  virtual int64_t eval_tokens() const = 0;  // packed: an evaluation batch's token budget; 0 padded
  // The step's input staging, which evaluation may use for its batches (train/evaluate.h); null
  // where the strategy has none (evaluation then copies each batch in synchronously).
  virtual InputStaging* eval_staging() { return nullptr; }
  virtual GradientCheckpointing checkpointing() const = 0;
  // Micro-batches computed by this process (FLOPs, padded and real tokens).
  virtual const TrainingWork& work() const = 0;

  // GPU runs: samples the device's free memory (at logging intervals), for measured vs planned.
  virtual void sample_device_memory() = 0;
  // summary.json's fields about how steps ran: TF32, padding multiple, CUDA graphs, GEMM autotune,
  // micro-batches and accumulation, packing, checkpointing, the arena and its memory report.
  virtual nlohmann::json report() const = 0;
};

}  // namespace ftune
