// AdamW with PyTorch's semantics (torch.optim.AdamW, foreach=False):
//   p <- p * (1 - lr * weight_decay)                       (decoupled decay, skipped when 0)
//   m <- beta1 m + (1 - beta1) g ;  v <- beta2 v + (1 - beta2) g^2
//   p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Parameters are one flat range (models/param_table.h); each parameter carries its own decay flag
// (no decay on biases and LayerNorm weights by default, as the HF Trainer) and an LR multiplier
// (1 unless layer-wise LR decay sets it). The moments live in the run's arena.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
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
// of the flat range, with this step's LR, decay and step size lr / (1 - beta1^t) already computed
// on the host (in double, as PyTorch).
struct AdamWSegment {
  int64_t offset, count;
  float lr, weight_decay, step_size;
};

class AdamW {
 public:
  AdamW(const ParamTable& params, AdamWOptions options);

  void add_to_plan(ArenaPlan& plan) const;
  void bind(const Arena& arena);  // zeroes the moments

  // One update of every parameter with learning rate `lr` (the scheduled value for this step).
  // The gradients are multiplied by grad_scale as they are read (gradient clipping's factor, so
  // clipping costs no extra pass over the gradients).
  void step(TensorView values, TensorView grads, float lr, float grad_scale = 1.0f);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t t) { step_ = t; }  // resuming
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
  void update_cpu(float* p, const float* g, float* m, float* v, float bc2_sqrt,
                  float grad_scale) const;
  std::vector<AdamWSegment> launch_;  // this step's per-segment scalars (reused, host memory)
  TensorView m_, v_;
  int64_t step_ = 0;
};

namespace cpu {
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                  float weight_decay, float beta1, float beta2, float eps, float step_size,
                  float bias_correction2_sqrt, float grad_scale);
}  // namespace cpu

namespace cuda {
// The same update over every segment (sorted by offset, not overlapping) in ONE launch per
// kAdamWSegmentsPerLaunch segments (the table travels as a kernel parameter: no device memory, no
// copy; a BERT-large has ~400 parameter tensors).
constexpr int kAdamWSegmentsPerLaunch = 768;
void adamw_update(float* p, const float* g, float* m, float* v, const AdamWSegment* segments,
                  int64_t count, float beta1, float beta2, float eps, float bias_correction2_sqrt,
                  float grad_scale);
}  // namespace cuda

}  // namespace ftune
