// The optimizer tail of a step: the job of the single-device step (train/single_device_step.h)
// after its micro-batch passes and gradient sync, once the step's gradients and loss are
// complete. On the device (no host round trip per step, DESIGN principle 4): the gradient norm,
// the clip factor and the non-finite check (optim/step_scalars.h, optim/grad_clip.h), then AdamW
// (optim/adamw.h), which applies the step or, when the loss or the norm is not finite, touches
// nothing (the skip counters move on the device). fp16: the gradients are S times too large; the
// device unscales the norm and the clip coefficient, and the host follows the loss scale after
// the step (optim/loss_scaler.h). Mixed precision: AdamW writes the 16-bit weight shadow in its
// pass where it can (full fine-tuning); otherwise the model recasts it before the next forward.
// The scheduled learning rate goes to the device first (one small kernel), so the tail's launches
// take the same arguments every step and, with CUDA graphs, replay as one graph (not in fp16,
// whose loss scale changes the arguments).
#pragma once

#include <cstdint>
#include <optional>

#include "models/sequence_classifier.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "train/step_graphs.h"
#include "train/train_config.h"

namespace ftune {

class OptimizerTail {
 public:
  // Over the model's trainable parameters and gradients and `adamw`'s state, until the arena is
  // rebuilt; `graphs` null: eager. `training` gives max_grad_norm and max_nonfinite_steps.
  OptimizerTail(SequenceClassifier& clf, AdamW& adamw, LossScaler& scaler,
                const TrainConfig::Training& training, StepGraphs* graphs)
      : clf_(clf), adamw_(adamw), scaler_(scaler), tc_(training), graphs_(graphs) {}

  // Clipping, the non-finite skip and AdamW at learning rate `lr`.
  void run(double lr);
  // fp16 only: the host reads the step's outcome after every step (one small read per step; bf16
  // and fp32 steps make none) and follows the loss scale. An overflow at the current scale halves
  // it and is logged here; a real divergence (non-finite loss, or gradients once the scale is
  // exhausted) is left to the run loop's warning and abort. Returns the skip count after an
  // overflow (the run loop does not warn about that skip again). `step` is 0-based.
  std::optional<int64_t> follow_loss_scale(int64_t step);

 private:
  SequenceClassifier& clf_;
  AdamW& adamw_;
  LossScaler& scaler_;
  const TrainConfig::Training& tc_;
  StepGraphs* graphs_;
};

}  // namespace ftune
