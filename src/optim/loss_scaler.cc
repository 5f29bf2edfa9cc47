// Dynamic loss scaling (see loss_scaler.h).
#include "optim/loss_scaler.h"

#include <cmath>

namespace ftune {

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  state_ = {options_.enabled ? options_.init_scale : 1.0f, 0.0f};
}

bool LossScaler::update(double scaled_norm) {
  if (!options_.enabled) return std::isfinite(scaled_norm);
  if (!std::isfinite(scaled_norm)) {
    state_[0] *= 0.5f;
    state_[1] = 0.0f;
    return false;
  }
  state_[1] += 1.0f;
  if (static_cast<int64_t>(state_[1]) >= options_.growth_interval) {
    state_[0] *= 2.0f;
    state_[1] = 0.0f;
  }
  return true;
}

void LossScaler::restore(float scale, int64_t good_steps) {
  if (!options_.enabled) return;
  state_ = {scale, static_cast<float>(good_steps)};
}

}  // namespace ftune
