// The step scalars on CUDA (see step_scalars.h): one-thread kernels on the compute stream, so the
// step's bookkeeping stays in stream order with its kernels and nothing waits on the host.
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "optim/step_scalars.h"

namespace ftune::cuda {
namespace {

__global__ void set_kernel(double* s, int slot, double value) { s[slot] = value; }

// Rounded multiply then add, never a fused multiply-add: the CPU's (and the former host loop's)
// arithmetic, bit for bit.
__global__ void add_loss_kernel(double* s, const float* loss, double share,
                                const double* share_at) {
  if (share_at) share = *share_at;
  if (share != 0.0) s[kStepLoss] = __dadd_rn(s[kStepLoss], __dmul_rn(share, double(loss[0])));
}

__global__ void finish_kernel(double* s, double max_norm, double max_nonfinite, float loss_scale,
                              bool overflow_skips) {
  finish_step_scalars(s, max_norm, max_nonfinite, loss_scale, overflow_skips);
}

__global__ void apply_kernel(double* s, float grad_scale) {
  s[kClipCoef] = grad_scale;
  s[kStepOk] = 1.0;
  s[kAdamSteps] += 1.0;
}

}  // namespace

void step_scalars_set(double* s, int slot, double value) {
  set_kernel<<<1, 1, 0, compute_stream()>>>(s, slot, value);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void step_scalars_add_loss(double* s, const float* loss, double share, const double* share_at) {
  add_loss_kernel<<<1, 1, 0, compute_stream()>>>(s, loss, share, share_at);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void step_scalars_finish(double* s, double max_norm, double max_nonfinite, float loss_scale,
                         bool overflow_skips) {
  finish_kernel<<<1, 1, 0, compute_stream()>>>(s, max_norm, max_nonfinite, loss_scale,
                                               overflow_skips);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void step_scalars_apply_unconditionally(double* s, float grad_scale) {
  apply_kernel<<<1, 1, 0, compute_stream()>>>(s, grad_scale);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
