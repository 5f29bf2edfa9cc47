// AdamW: moments in the arena, one update per parameter segment, dispatched per device.
#include "train/adamw.h"

#include <cmath>

#include "core/memory.h"
#include "ops/dispatch.h"

namespace ftune {

AdamW::AdamW(const ParamTable& params, AdamWOptions options) : options_(options), params_(params) {
  for (const ParamSpec& s : params.specs())
    segments_.push_back({s.offset, s.shape.numel(), s.decay, 1.0f});
}

void AdamW::add_to_plan(ArenaPlan& plan) const {
  plan.add_flat("adam/exp_avg", DType::F32, params_.total());
  plan.add_flat("adam/exp_avg_sq", DType::F32, params_.total());
}

void AdamW::bind(const Arena& arena) {
  m_ = arena.view("adam/exp_avg");
  v_ = arena.view("adam/exp_avg_sq");
  fill_zero(m_);
  fill_zero(v_);
  step_ = 0;
}

void AdamW::set_lr_scale(const std::string& param, float scale) {
  const ParamSpec& spec = params_.at(param);
  for (Segment& s : segments_)
    if (s.offset == spec.offset) s.lr_scale = scale;
}

void AdamW::update_cpu(float* p, const float* g, float* m, float* v, float bc2_sqrt,
                       float grad_scale) const {
  for (const AdamWSegment& s : launch_)
    cpu::adamw_update(p + s.offset, g + s.offset, m + s.offset, v + s.offset, s.count, s.lr,
                      s.weight_decay, options_.beta1, options_.beta2, options_.eps, s.step_size,
                      bc2_sqrt, grad_scale);
}

void AdamW::step(TensorView values, TensorView grads, float lr, float grad_scale) {
  const char* op = "adamw_step";
  check_f32(op, "values", values, Shape{params_.total()});
  check_f32(op, "grads", grads, Shape{params_.total()});
  FTUNE_ASSERT(m_.defined(), "AdamW::step before bind");
  const Device dev = common_device(op, {values, grads, m_, v_});
  ++step_;
  // PyTorch computes the bias corrections in double from the step count, then uses them as
  // Python floats; the same here.
  const double bc1 = 1.0 - std::pow(double(options_.beta1), double(step_));
  const double bc2 = 1.0 - std::pow(double(options_.beta2), double(step_));
  float* p = values.data_as<float>();
  const float* g = grads.data_as<float>();
  float* m = m_.data_as<float>();
  float* v = v_.data_as<float>();
  launch_.clear();
  for (const Segment& s : segments_) {
    const float seg_lr = lr * s.lr_scale;
    launch_.push_back({s.offset, s.count, seg_lr, s.decay ? options_.weight_decay : 0.0f,
                       static_cast<float>(double(seg_lr) / bc1)});
  }
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  FTUNE_DISPATCH(
      op, dev, update_cpu(p, g, m, v, bc2_sqrt, grad_scale),
      cuda::adamw_update(p, g, m, v, launch_.data(), static_cast<int64_t>(launch_.size()),
                         options_.beta1, options_.beta2, options_.eps, bc2_sqrt, grad_scale));
}

}  // namespace ftune
