// Dynamic loss scaling for fp16 mixed precision (torch.cuda.amp.GradScaler's rule). fp16 has 5
// exponent bits: small activation gradients underflow to zero unless the loss gradient is scaled up
// by S, and large ones overflow to Inf when S is too large. Each step:
//   backward from S * loss  ->  gradients are S times too large;
//   the norm of the scaled gradients is finite: unscale (the clip coefficient is divided by S, so
//     the optimizer reads g / S at no extra pass), take the step, and after `growth_interval`
//     finite steps in a row double S;
//   it is not finite: skip the step (weights and moments untouched) and halve S.
// bf16 and fp32 need none of this (bf16 has fp32's exponent range): the scaler is then disabled and
// S is 1. The state (S, finite steps since the last change) lives in a small buffer of two floats
// so it can later move to the device with the rest of the step's bookkeeping.
#pragma once

#include <array>
#include <cstdint>

namespace ftune {

struct LossScalerOptions {
  bool enabled = false;
  float init_scale = 65536.0f;  // 2^16, as GradScaler
  int64_t growth_interval = 2000;
  float min_scale = 1.0f;  // below this an overflow is a real divergence, not a scale problem
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  bool enabled() const { return options_.enabled; }
  float scale() const { return state_[0]; }  // S (1 when disabled)
  int64_t good_steps() const { return static_cast<int64_t>(state_[1]); }

  // After backward: the norm of the scaled gradients. Returns true when the step should go ahead
  // (finite), updating the growth counter (and doubling S at the interval); false when it must be
  // skipped, halving S.
  bool update(double scaled_norm);
  // True when S has fallen below options.min_scale: overflows are no longer a scaling issue.
  bool exhausted() const { return options_.enabled && state_[0] < options_.min_scale; }

  // Resuming: the saved state.
  void restore(float scale, int64_t good_steps);

 private:
  LossScalerOptions options_;
  std::array<float, 2> state_;  // {S, finite steps since S last changed}
};

}  // namespace ftune
