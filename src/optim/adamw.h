// AdamW with PyTorch's semantics (torch.optim.AdamW, foreach=False):
//   p <- p * (1 - lr * weight_decay)                       (decoupled decay, skipped when 0)
//   m <- beta1 m + (1 - beta1) g ;  v <- beta2 v + (1 - beta2) g^2
//   p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Parameters are one flat range (models/param_table.h); each parameter carries its own decay flag
// (no decay on biases and LayerNorm weights by default, as the HF Trainer) and an LR multiplier
// (1 unless layer-wise LR decay sets it). The moments live in the run's arena.
//
// Multi-tensor: one launch updates every parameter (CUDA), with fp32 master weights and, when
// asked, a bf16 / f16 shadow copy of the updated weights written in the same pass (compute
// weights for mixed precision). The shadow may cover a sub-range of the parameters (the encoder
// layers' weights, models/sequence_classifier.h): no separate cast pass after the step. The step's own scalars come from the device (optim/step_scalars.h,
// the buffer "step/scalars" this class plans): the clip coefficient the gradients are multiplied
// by, the "apply" flag (a skipped non-finite step leaves weights, moments and shadow bit for bit
// as they were) and the step count t of the bias corrections, advanced on the device by applied
// steps only. Nothing is read back to the host.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "models/param_table.h"

namespace ftune {

struct AdamWOptions {
  float lr = 5e-5f;  // peak LR; the schedule scales it per step
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// One parameter segment of a step as the update kernels see it: elements [offset, offset + count)
// of the flat range, with this step's LR and decay. The kernels compute the step size
// lr / (1 - beta1^t) from the device's t (in double, as PyTorch).
struct AdamWSegment {
  int64_t offset, count;
  float lr, weight_decay;
};

// The bias corrections of step t, in double from the step count as PyTorch computes them: bc1 =
// 1 - beta1^t and sqrt(1 - beta2^t) as the f32 the update divides by.
struct AdamWBiasCorrection {
  double bc1;
  float bc2_sqrt;
};

class AdamW {
 public:
  AdamW(const ParamTable& params, AdamWOptions options);

  void add_to_plan(ArenaPlan& plan) const;  // the moments and the step scalars
  void bind(const Arena& arena);             // zeroes the moments and the step scalars

  // The trainer's step: the update of every parameter with learning rate `lr` (the scheduled value
  // for this step) if the step scalars say the step is applied (t already advanced by
  // step_scalars_finish), with the gradients multiplied by the clip coefficient as they are read
  // (clipping costs no extra pass). shadow: undefined, or a contiguous bf16 / f16 view that
  // receives the updated weights values[shadow_offset, shadow_offset + shadow.numel()) rounded to
  // nearest even (a skipped step leaves it untouched, as the weights).
  void apply(TensorView values, TensorView grads, float lr, TensorView shadow = TensorView(),
             int64_t shadow_offset = 0);
  // The same update with this step's learning rate read from the step scalars (kLearningRate,
  // written by set_learning_rate in stream order before it) instead of passed: what a captured
  // CUDA graph of the optimizer step replays (train/step_graphs.h). Bit-identical to apply() with
  // that rate.
  void set_learning_rate(float lr);
  void apply_scheduled(TensorView values, TensorView grads, TensorView shadow = TensorView(),
                       int64_t shadow_offset = 0);
  // An unconditional step with a host-given gradient factor (tests and parity checks): t += 1,
  // then apply().
  void step(TensorView values, TensorView grads, float lr, float grad_scale = 1.0f);
  // The step scalars buffer (optim/step_scalars.h); the trainer accumulates its step into it.
  TensorView step_scalars() const { return scalars_; }
  // AdamW's t: a read of the device (a synchronisation); call at checkpoints, not per step.
  int64_t steps_taken() const;
  void set_steps_taken(int64_t t);  // resuming (in stream order, no synchronisation)
  void set_lr_scale(const std::string& param, float scale);

  const AdamWOptions& options() const { return options_; }
  TensorView exp_avg() const { return m_; }
  TensorView exp_avg_sq() const { return v_; }

 private:
  struct Segment {
    int64_t offset, count;
    bool decay;
    float lr_scale;
  };
  AdamWOptions options_;
  const ParamTable& params_;
  std::vector<Segment> segments_;
  // shadow_bf16 / shadow_f16: null, or the shadow of elements [shadow_begin, shadow_end).
  void update_cpu(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                  f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                  const double* scalars, bool lr_from_scalars) const;
  // apply() and apply_scheduled(): the segments carry lr x scale, or only the scale.
  void update(TensorView values, TensorView grads, float lr, bool lr_from_scalars,
              TensorView shadow, int64_t shadow_offset);
  std::vector<AdamWSegment> launch_;  // this step's per-segment scalars (reused, host memory)
  TensorView m_, v_, scalars_;
};

// From t (a double holding an integer >= 1).
FTUNE_HD AdamWBiasCorrection adamw_bias_correction(float beta1, float beta2, double t) {
  return {1.0 - pow(double(beta1), t), static_cast<float>(sqrt(1.0 - pow(double(beta2), t)))};
}

namespace cpu {
// One segment; shadow_bf16 / shadow_f16: null, or where the updated weights go rounded.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                  float weight_decay, float beta1, float beta2, float eps, float step_size,
                  float bias_correction2_sqrt, float grad_scale, bf16_t* shadow_bf16,
                  f16_t* shadow_f16);
}  // namespace cpu

namespace cuda {
// The same update over every segment (sorted by offset, not overlapping) in ONE launch per
// kAdamWSegmentsPerLaunch segments (the table travels as a kernel parameter: no device memory, no
// copy; a BERT-large has ~400 parameter tensors). scalars: the device's step scalars.
// shadow_bf16 / shadow_f16: null, or the shadow of elements [shadow_begin, shadow_end) (its
// element 0 is element shadow_begin of p).
constexpr int kAdamWSegmentsPerLaunch = 768;
void adamw_update(float* p, const float* g, float* m, float* v, bf16_t* shadow_bf16,
                  f16_t* shadow_f16, int64_t shadow_begin, int64_t shadow_end,
                  const AdamWSegment* segments, int64_t count, float beta1, float beta2,
                  float eps, const double* scalars, bool lr_from_scalars = false);
}  // namespace cuda

}  // namespace ftune
