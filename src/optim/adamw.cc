// AdamW: moments and step scalars in the arena, one update of every parameter segment, dispatched
// per device.
#include "optim/adamw.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/memory.h"
#include "ops/dispatch.h"
#include "optim/step_scalars.h"

namespace ftune {

AdamW::AdamW(const ParamTable& params, AdamWOptions options) : options_(options), params_(params) {
  for (const ParamSpec& s : params.specs())
    segments_.push_back({s.offset, s.shape.numel(), s.decay, 1.0f});
}

void AdamW::add_to_plan(ArenaPlan& plan) const {
  plan.add_flat("adam/exp_avg", DType::F32, params_.total());
  plan.add_flat("adam/exp_avg_sq", DType::F32, params_.total());
  plan.add(kStepScalarsBuffer, DType::U8, {kStepScalarsBytes});
}

void AdamW::bind(const Arena& arena) {
  m_ = arena.view("adam/exp_avg");
  v_ = arena.view("adam/exp_avg_sq");
  fill_zero(m_);
  fill_zero(v_);
  scalars_ = arena.view(kStepScalarsBuffer);
  fill_zero(scalars_);
}

int64_t AdamW::steps_taken() const {
  return static_cast<int64_t>(read_step_scalars(scalars_)[kAdamSteps]);
}

void AdamW::set_steps_taken(int64_t t) { step_scalars_set(scalars_, kAdamSteps, double(t)); }

void AdamW::set_lr_scale(const std::string& param, float scale) {
  const ParamSpec& spec = params_.at(param);
  for (Segment& s : segments_)
    if (s.offset == spec.offset) s.lr_scale = scale;
}

void AdamW::update_cpu(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                       f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                       const double* scalars, bool lr_from_scalars) const {
  if (scalars[kStepOk] == 0.0) return;  // a skipped step: nothing is touched
  const AdamWBiasCorrection bc =
      adamw_bias_correction(options_.beta1, options_.beta2, scalars[kAdamSteps]);
  const float grad_scale = static_cast<float>(scalars[kClipCoef]);
  const bool shadowed = shadow_bf16 || shadow_f16;
  const float step_lr = lr_from_scalars ? static_cast<float>(scalars[kLearningRate]) : 1.0f;
  for (const AdamWSegment& s : launch_) {
    const float lr = lr_from_scalars ? step_lr * s.lr : s.lr;
    const float step_size = static_cast<float>(double(lr) / bc.bc1);
    // Elements [lo, hi) of this segment, with the shadow written when `shadow` (each element's
    // arithmetic is the same either way).
    auto update = [&](int64_t lo, int64_t hi, bool shadow) {
      if (hi <= lo) return;
      cpu::adamw_update(p + lo, g + lo, m + lo, v + lo, hi - lo, lr, s.weight_decay,
                        options_.beta1, options_.beta2, options_.eps, step_size, bc.bc2_sqrt,
                        grad_scale,
                        shadow && shadow_bf16 ? shadow_bf16 + (lo - shadow_begin) : nullptr,
                        shadow && shadow_f16 ? shadow_f16 + (lo - shadow_begin) : nullptr);
    };
    const int64_t begin = s.offset, end = s.offset + s.count;
    if (!shadowed) {
      update(begin, end, false);
      continue;
    }
    // The segment cut at the shadow's bounds: before it, inside it, after it.
    const int64_t sb = std::clamp(shadow_begin, begin, end), se = std::clamp(shadow_end, sb, end);
    update(begin, sb, false);
    update(sb, se, true);
    update(se, end, false);
  }
}

void AdamW::step(TensorView values, TensorView grads, float lr, float grad_scale) {
  FTUNE_ASSERT(scalars_.defined(), "AdamW::step before bind");
  step_scalars_apply_unconditionally(scalars_, grad_scale);
  apply(values, grads, lr);
}

void AdamW::apply(TensorView values, TensorView grads, float lr, TensorView shadow,
                  int64_t shadow_offset) {
  update(values, grads, lr, false, shadow, shadow_offset);
}

void AdamW::set_learning_rate(float lr) {
  FTUNE_ASSERT(scalars_.defined(), "AdamW::set_learning_rate before bind");
  step_scalars_set(scalars_, kLearningRate, double(lr));
}

void AdamW::apply_scheduled(TensorView values, TensorView grads, TensorView shadow,
                            int64_t shadow_offset) {
  update(values, grads, 1.0f, true, shadow, shadow_offset);
}

void AdamW::update(TensorView values, TensorView grads, float lr, bool lr_from_scalars,
                   TensorView shadow, int64_t shadow_offset) {
  const char* op = "adamw_step";
  check_f32(op, "values", values, Shape{params_.total()});
  check_f32(op, "grads", grads, Shape{params_.total()});
  FTUNE_ASSERT(m_.defined(), "AdamW::apply before bind");
  bf16_t* shadow_bf16 = nullptr;
  f16_t* shadow_f16 = nullptr;
  if (shadow.defined()) {
    if (shadow_offset < 0 || shadow.numel() > params_.total() - shadow_offset ||
        !shadow.is_contiguous() || (shadow.dtype != DType::BF16 && shadow.dtype != DType::F16))
      throw ShapeError(fmt::format("{}: shadow must be a contiguous bf16 or f16 view of at most "
                                   "the {} parameters from element {}, got {}",
                                   op, params_.total(), shadow_offset, shadow.describe()));
    if (shadow.dtype == DType::BF16)
      shadow_bf16 = shadow.data_as<bf16_t>();
    else
      shadow_f16 = shadow.data_as<f16_t>();
  }
  const Device dev = shadow.defined() ? common_device(op, {values, grads, m_, v_, scalars_, shadow})
                                      : common_device(op, {values, grads, m_, v_, scalars_});
  float* p = values.data_as<float>();
  const float* g = grads.data_as<float>();
  float* m = m_.data_as<float>();
  float* v = v_.data_as<float>();
  const double* scalars = step_scalars_data(scalars_);
  const int64_t shadow_end = shadow.defined() ? shadow_offset + shadow.numel() : shadow_offset;
  launch_.clear();
  for (const Segment& s : segments_)
    launch_.push_back({s.offset, s.count, lr_from_scalars ? s.lr_scale : lr * s.lr_scale,
                       s.decay ? options_.weight_decay : 0.0f});
  FTUNE_DISPATCH(
      op, dev,
      update_cpu(p, g, m, v, shadow_bf16, shadow_f16, shadow_offset, shadow_end, scalars,
                 lr_from_scalars),
      cuda::adamw_update(p, g, m, v, shadow_bf16, shadow_f16, shadow_offset, shadow_end,
                         launch_.data(), static_cast<int64_t>(launch_.size()), options_.beta1,
                         options_.beta2, options_.eps, scalars, lr_from_scalars));
}

}  // namespace ftune
