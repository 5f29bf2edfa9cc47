// The micro-batch passes of one optimizer step: the first job of the single-device step
// (train/single_device_step.h), before the gradient sync (train/gradient_sync.h) and the optimizer
// tail (train/optimizer_tail.h).
//
// Determinism, and independence from the micro-batch size: the step batch's rows are ordered by
// length; the step cuts them into contiguous micro-batches (the last may be smaller), each padded
// only to its own longest row (or packed up to a token budget). Each micro-batch's backward is
// scaled by its share of the step's loss (rows, or with class weights the sum of its rows' label
// weights, or a causal LM's counted tokens, over the step's), so the gradient is that of the mean
// loss over the whole step batch.
// Dropout masks are Philox streams keyed by (seed, site, s) and indexed by a row's place in the
// step batch and its token position (DropoutPlan: row0 = the micro-batch's first row, stream_seq
// = Tv = data.max_length clipped to the model's positions, a run constant), so they do not depend
// on how the step is cut. A run with micro-batch m and accumulation a thus follows the trajectory
// of any (m', a') with m'a' = ma, up to float summation order, and the micro-batch may change
// between steps (the out-of-memory fallback) without changing what is computed.
//
// The step's loss is the mean over all its rows: micro-batch k's mean loss weighs W_k / W_step
// (its share of the loss's denominator), in the loss and in its backward; the device accumulates
// it (optim/step_scalars.h). What differs between micro-batches (that share, fp16's loss scale in
// the gradient scale, dropout's row0 and offset) is staged with their inputs and read on the
// device, so a CUDA graph replays any micro-batch of its shape (train/step_graphs.h). Micro-batch
// k + 1's inputs are staged (host work and an asynchronous copy, train/input_staging.h) once k's
// kernels are queued, so they overlap k's compute.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/batch.h"
#include "models/backbone.h"
#include "models/sequence_classifier.h"
#include "train/debug_hooks.h"
#include "train/flops.h"
#include "train/gradient_sync.h"
#include "train/input_staging.h"
#include "train/step_graphs.h"

namespace ftune {

// The denominator of the mean cross-entropy over labels [begin, end) (ops/cross_entropy.h): the
// number of counted rows, or with class weights the sum of their label weights; in the same order
// and precision as the loss op sums it.
double loss_weight(const std::vector<int32_t>& labels, size_t begin, size_t end,
                   const std::vector<float>& class_weights);
// The loss weight of rows [row0, row0 + rows) of a batch: of their labels, or a causal LM's
// (Batch::token_labels) the tokens counted, so micro-batch shares add up to the step's mean per
// token, as transformers' num_items_in_batch divides it.
double rows_loss_weight(const Batch& batch, int64_t row0, int64_t rows,
                        const std::vector<float>& class_weights);

// What the passes run on: the model, its staged inputs and CUDA graphs (null: eager), valid until
// the arena is rebuilt; the gradient sync; and the run's constants.
struct MicroBatchSetup {
  const ModelSpec& model;
  SequenceClassifier& clf;
  InputStaging& staging;
  StepGraphs* graphs;
  GradientSync& sync;
  const LossOptions& loss;
  uint64_t seed;       // training.seed: dropout's key
  int64_t stream_seq;  // Tv of the dropout streams
};

// One step's passes: rows [row0, row0 + rows) of `step_batch` per cut, in order.
class MicroBatchPasses {
 public:
  // `positions`: the step batch's position ids; `step`: the optimizer step (0-based, dropout's
  // offset); `loss_scale`: fp16's S (1 otherwise); `step_loss`: the step scalars, on the device.
  MicroBatchPasses(const MicroBatchSetup& setup, const Batch& step_batch,
                   const std::vector<int32_t>& positions,
                   std::vector<std::pair<int64_t, int64_t>> cuts, int64_t step, float loss_scale,
                   TensorView step_scalars, const StepFaults& faults);

  // The step's gradients and loss start at zero; the first micro-batch's inputs are staged.
  void begin();
  // Forward and backward over every cut, the gradients accumulated; `run_micro_batches`: forward
  // passes of the run before this step (fault injection). Throws OutOfMemoryError when an
  // allocation fails part-way.
  void run(int64_t run_micro_batches);

  int64_t passes() const { return passes_; }           // micro-batches computed
  const TrainingWork& work() const { return work_; }  // their FLOPs and tokens

 private:
  MicroParams micro_params(int64_t row0, int64_t rows) const;
  void stage(size_t cut);

  const MicroBatchSetup& setup_;
  const Batch& batch_;
  const std::vector<int32_t>& positions_;
  const std::vector<std::pair<int64_t, int64_t>> cuts_;
  const int64_t step_;
  const float loss_scale_;
  const TensorView scalars_;
  const StepFaults& faults_;
  const double step_weight_;  // the loss's denominator over the whole step batch
  int slot_ = 0;              // the staging slot of the next micro-batch's inputs
  int64_t passes_ = 0;
  TrainingWork work_;
};

}  // namespace ftune
