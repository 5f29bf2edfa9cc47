// The step scalars (see step_scalars.h): checks, dispatch, the CPU side and the host's read.
#include "optim/step_scalars.h"

#include <atomic>

#include "core/memory.h"
#include "ops/dispatch.h"
#include "optim/grad_clip.h"

namespace ftune {
namespace {

std::atomic<int64_t> g_reads{0};

void check_scalars(const char* op, TensorView s) {
  if (!s.defined() || s.dtype != DType::U8 || s.numel() != kStepScalarsBytes || !s.is_contiguous())
    throw ShapeError(fmt::format("{}: step scalars must be {} contiguous bytes, got {}", op,
                                 kStepScalarsBytes, s.describe()));
}

}  // namespace

namespace cpu {
void step_scalars_add_loss(double* s, const float* loss, double share) {
  if (share != 0.0) s[kStepLoss] += share * double(loss[0]);
}
}  // namespace cpu

double* step_scalars_data(TensorView scalars) {
  check_scalars("step_scalars", scalars);
  return static_cast<double*>(scalars.data);
}

void step_scalars_set(TensorView scalars, StepSlot slot, double value) {
  double* s = step_scalars_data(scalars);
  FTUNE_DISPATCH("step_scalars_set", scalars.device, s[slot] = value,
                 cuda::step_scalars_set(s, slot, value));
}

void step_scalars_begin(TensorView scalars) { step_scalars_set(scalars, kStepLoss, 0.0); }

void step_scalars_add_loss(TensorView scalars, TensorView loss, double share,
                           const double* share_at) {
  const char* op = "step_scalars_add_loss";
  check_f32(op, "loss", loss, Shape{1});
  double* s = step_scalars_data(scalars);
  const Device dev = common_device(op, {scalars, loss});
  FTUNE_DISPATCH(op, dev,
                 cpu::step_scalars_add_loss(s, loss.data_as<float>(), share_at ? *share_at : share),
                 cuda::step_scalars_add_loss(s, loss.data_as<float>(), share, share_at));
}

void step_scalars_finish(TensorView scalars, TensorView grads, double max_norm,
                         int64_t max_nonfinite, float loss_scale, bool overflow_skips) {
  const char* op = "step_scalars_finish";
  check_f32(op, "grads", grads, grads.shape);
  double* s = step_scalars_data(scalars);
  const Device dev = common_device(op, {scalars, grads});
  const float* g = grads.data_as<float>();
  const int64_t n = grads.numel();
  FTUNE_DISPATCH(op, dev,
                 {
                   s[kGradSumSq] = cpu::sum_of_squares(g, n);
                   finish_step_scalars(s, max_norm, double(max_nonfinite), loss_scale, overflow_skips);
                 },
                 {
                   cuda::sum_of_squares_into(s + kGradSumSq, g, n);
                   cuda::step_scalars_finish(s, max_norm, double(max_nonfinite), loss_scale,
                                             overflow_skips);
                 });
}

void step_scalars_apply_unconditionally(TensorView scalars, float grad_scale) {
  double* s = step_scalars_data(scalars);
  FTUNE_DISPATCH("step_scalars_apply", scalars.device,
                 {
                   s[kClipCoef] = grad_scale;
                   s[kStepOk] = 1.0;
                   s[kAdamSteps] += 1.0;
                 },
                 cuda::step_scalars_apply_unconditionally(s, grad_scale));
}

StepScalarValues read_step_scalars(TensorView scalars) {
  check_scalars("read_step_scalars", scalars);
  StepScalarValues v{};
  copy(TensorView(v.data(), DType::U8, Device::cpu(), Shape{kStepScalarsBytes}), scalars);
  g_reads.fetch_add(1, std::memory_order_relaxed);
  return v;
}

void write_step_scalars(TensorView scalars, const StepScalarValues& values) {
  check_scalars("write_step_scalars", scalars);
  copy(scalars, TensorView(const_cast<double*>(values.data()), DType::U8, Device::cpu(),
                           Shape{kStepScalarsBytes}));
}

int64_t step_scalar_reads() { return g_reads.load(std::memory_order_relaxed); }

}  // namespace ftune
