// Global-norm gradient clipping with torch.nn.utils.clip_grad_norm_'s semantics:
//   norm = sqrt(sum of squares of every gradient); if max_norm / (norm + 1e-6) < 1, every
//   gradient is scaled by that factor (ops/scale.h). The norm is also what NaN/Inf detection reads.
#pragma once

#include "core/tensor.h"

namespace ftune {

// Sum of squares of a flat f32 gradient buffer, accumulated in double (deterministic for a given
// thread count).
double grad_sum_of_squares(TensorView grads);
// Clips in place; returns the norm before clipping (may be NaN/Inf: the caller decides).
double clip_grad_norm(TensorView grads, double max_norm);
// The factor clip_grad_norm would scale by: min(1, max_norm / (norm + 1e-6)). The trainer hands it
// to the optimizer, which applies it while reading the gradients.
float clip_coefficient(double norm, double max_norm);

namespace cpu {
double sum_of_squares(const float* x, int64_t n);
}  // namespace cpu

namespace cuda {
// Reduced on the device into a fixed per-device scratch (allocated once), in double with a fixed
// launch shape and order (deterministic); the 8-byte result is the only thing read back.
double sum_of_squares(const float* x, int64_t n);
// The same reduction, its result left on the device at *result (no synchronisation): the
// trainer's step scalars (optim/step_scalars.h).
void sum_of_squares_into(double* result, const float* x, int64_t n);
}  // namespace cuda

}  // namespace ftune
