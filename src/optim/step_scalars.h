// The scalars of a training step, kept on the device so that a step needs no host round trip
// (DESIGN principle 4): the step's loss, the logging window's loss sum, the global gradient norm,
// the clip coefficient, the "apply this step" flag, the skip counters and AdamW's step count t.
// They live in one small arena buffer ("step/scalars", kStepSlots doubles) that the step's kernels
// read and write in stream order; the host reads the whole buffer (read_step_scalars) once per
// logging interval and at evaluation, checkpoint, interrupt and end of run.
//
// A step on the device:
//   step_scalars_begin          step loss <- 0
//   step_scalars_add_loss       per micro-batch: step loss += share x micro-batch mean loss
//   step_scalars_finish         sum of squares of the gradients -> norm, clip coefficient, finite
//                               check of loss and norm; applied: t += 1, in-a-row <- 0; skipped:
//                               skipped += 1, in-a-row += 1; window loss += step loss
//   AdamW::apply (adamw.h)      reads ok / clip coefficient / t; a skipped step touches nothing
// The arithmetic is the host code's it replaces, in double, in the same order (bit-identical on
// the CPU). When in-a-row reaches max_nonfinite the step number is latched (kAbortStep) and no
// later step is applied: the host sees the abort at its next read, up to log_every steps late,
// with the weights and moments exactly as they were before the first non-finite step of the run.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/tensor.h"

namespace ftune {

enum StepSlot : int {
  kStepLoss = 0,       // this step: sum of share x micro-batch loss
  kLastStepLoss,       // the last finished step's loss
  kWindowLoss,         // sum of step losses since the host last reset the window
  kGradSumSq,          // sum of squares of the gradients of the last finished step
  kGradNorm,           // its square root
  kClipCoef,           // the f32 factor the optimizer scales gradients by (clip_grad_norm's)
  kStepOk,             // 1: the optimizer applies the step; 0: it is skipped
  kSkippedSteps,       // non-finite steps skipped, in total
  kNonfiniteInRow,     // consecutive non-finite steps up to the last finished one
  kAdamSteps,          // AdamW's t (bias correction); advanced only by applied steps
  kStepsFinished,      // steps finished (the data cursor as the device counts it)
  kAbortStep,          // 0, or the step (1-based) at which kNonfiniteInRow reached the limit
  kScaleOverflow,      // fp16: 1 when the last step was skipped for an overflow at its loss scale
  kLearningRate,       // this step's scheduled learning rate (AdamW::apply_scheduled reads it)
  kStepSlots = 16      // (spare slots up to here)
};

using StepScalarValues = std::array<double, kStepSlots>;

// The buffer's arena entry: kStepSlots doubles as raw bytes (there is no f64 DType).
constexpr const char* kStepScalarsBuffer = "step/scalars";
constexpr int64_t kStepScalarsBytes = kStepSlots * sizeof(double);

// finite(x) for double without <cmath> differences between host and device.
FTUNE_HD bool step_finite(double x) { return x - x == 0.0; }

// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)), as the f32 the
// gradients are multiplied by; 1 for a non-finite norm (the step is skipped anyway).
FTUNE_HD float clip_factor(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return step_finite(norm) && coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

// The end of a step, once kGradSumSq holds the gradients' sum of squares. One function for the CPU
// and the one-thread CUDA kernel.
// fp16 (optim/loss_scaler.h): the gradients are loss_scale times too large, so the norm is
// unscaled and the clip coefficient divided by the scale (the optimizer reads g / S at no extra
// pass); with overflow_skips (the scaler can still lower S) a finite loss with non-finite
// gradients is an overflow at this scale: skipped and flagged in kScaleOverflow, not counted as a
// divergence. loss_scale 1 without overflow_skips is the bf16 / fp32 step, bit for bit.
FTUNE_HD void finish_step_scalars(double* s, double max_norm, double max_nonfinite,
                                  float loss_scale = 1.0f, bool overflow_skips = false) {
  const double loss = s[kStepLoss];
  const double norm = sqrt(s[kGradSumSq]) / static_cast<double>(loss_scale);
  s[kGradNorm] = norm;
  s[kLastStepLoss] = loss;
  s[kWindowLoss] += loss;
  s[kClipCoef] = clip_factor(norm, max_norm) / loss_scale;
  s[kStepsFinished] += 1.0;
  s[kScaleOverflow] = 0.0;
  if (s[kAbortStep] != 0.0) {
    s[kStepOk] = 0.0;  // aborting: nothing is applied any more, nothing counted
  } else if (step_finite(loss) && step_finite(norm)) {
    s[kStepOk] = 1.0;
    s[kNonfiniteInRow] = 0.0;
    s[kAdamSteps] += 1.0;
  } else if (overflow_skips && step_finite(loss)) {
    s[kStepOk] = 0.0;
    s[kSkippedSteps] += 1.0;
    s[kScaleOverflow] = 1.0;
  } else {
    s[kStepOk] = 0.0;
    s[kSkippedSteps] += 1.0;
    s[kNonfiniteInRow] += 1.0;
    if (s[kNonfiniteInRow] >= max_nonfinite) s[kAbortStep] = s[kStepsFinished];
  }
}

// A view of the buffer as doubles (any device).
double* step_scalars_data(TensorView scalars);

// Step loss <- 0.
void step_scalars_begin(TensorView scalars);
// Step loss += share x loss[0] (loss: a 1-element f32 tensor on the same device), unless share
// is 0 (rows that all weigh 0 add nothing, not 0 x NaN).
// share_at (optional, in memory on the scalars' device): the share is read from it when the kernel
// runs instead (a replayed CUDA graph sees the micro-batch's value: core/philox.h MicroParams).
void step_scalars_add_loss(TensorView scalars, TensorView loss, double share,
                           const double* share_at = nullptr);
// The gradients' sum of squares (deterministic, in double: grad_clip.h) then
// finish_step_scalars.
void step_scalars_finish(TensorView scalars, TensorView grads, double max_norm,
                         int64_t max_nonfinite, float loss_scale = 1.0f,
                         bool overflow_skips = false);
// An optimizer step without the trainer's checks (AdamW::step): clip coefficient <- grad_scale,
// ok <- 1, t += 1.
void step_scalars_apply_unconditionally(TensorView scalars, float grad_scale);
// One slot <- value, in stream order (no synchronisation).
void step_scalars_set(TensorView scalars, StepSlot slot, double value);

// The host's read: the whole buffer in one copy (a synchronisation on a GPU). Counted.
StepScalarValues read_step_scalars(TensorView scalars);
// Writes every slot (resume, arena rebuild).
void write_step_scalars(TensorView scalars, const StepScalarValues& values);
// How many times read_step_scalars ran in this process (tests: no read between log intervals).
int64_t step_scalar_reads();

namespace cpu {
void step_scalars_add_loss(double* s, const float* loss, double share);
}  // namespace cpu

namespace cuda {
void step_scalars_set(double* s, int slot, double value);
void step_scalars_add_loss(double* s, const float* loss, double share, const double* share_at);
void step_scalars_finish(double* s, double max_norm, double max_nonfinite, float loss_scale,
                         bool overflow_skips);
void step_scalars_apply_unconditionally(double* s, float grad_scale);
}  // namespace cuda

}  // namespace ftune
