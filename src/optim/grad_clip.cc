// Gradient norm and clipping: checks and dispatch (the scaling is ops/scale.h).
#include "optim/grad_clip.h"

#include <cmath>

#include "ops/dispatch.h"
#include "ops/scale.h"
#include "optim/step_scalars.h"

namespace ftune {

double grad_sum_of_squares(TensorView grads) {
  const char* op = "grad_sum_of_squares";
  check_f32(op, "grads", grads, grads.shape);
  double s = 0.0;
  FTUNE_DISPATCH(op, grads.device, s = cpu::sum_of_squares(grads.data_as<float>(), grads.numel()),
                 s = cuda::sum_of_squares(grads.data_as<float>(), grads.numel()));
  return s;
}

float clip_coefficient(double norm, double max_norm) {
  // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.0, applied in the grads' dtype;
  // one expression with the device-side step (optim/step_scalars.h).
  return clip_factor(norm, max_norm);
}

double clip_grad_norm(TensorView grads, double max_norm) {
  const double norm = std::sqrt(grad_sum_of_squares(grads));
  const float coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0f) scale_inplace(grads, coef);
  return norm;
}

}  // namespace ftune
