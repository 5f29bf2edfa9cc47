// Gradient sync: what a step does between its micro-batch passes and its optimizer tail, by how
// many processes compute it (Marian's split of a single graph group from a synchronous one). The
// single-device step (train/single_device_step.h) calls one interface:
//   LocalGradientSync  one process computes every row of the step batch; its accumulated
//                      gradients and step loss are already the step's.
//   RankGradientSync   data parallel (dist/gradient_reducer.h): this rank computes its contiguous
//                      row range (whole query groups in a listwise / margin_mse run); the step's
//                      last backward starts the gradients' sum over the ranks layer by layer
//                      (run eagerly: a replayed CUDA graph runs no host code to say when a layer is
//                      done); the rest of the sum, the ranks' verdict on a failed step and the
//                      step loss's sum follow the passes, so the optimizer tail sees the same
//                      gradients and loss on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/tensor.h"
#include "dist/gradient_reducer.h"
#include "models/param_table.h"

namespace ftune {

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // This process's rows [begin, end) of a step batch of `step_rows` rows (whole groups of
  // `group_rows` rows), and the most rows any process computes of one.
  virtual std::pair<int64_t, int64_t> rows(int64_t step_rows, int64_t group_rows) const = 0;
  virtual int64_t most_rows(int64_t step_rows, int64_t group_rows) const = 0;
  // The trainable parameters and their f32 gradient buffer; again whenever the arena is rebuilt.
  virtual void plan(const ParamTable& params, TensorView grads) = 0;
  // Whether the step's last backward reports its finished layers (it then runs eagerly, after
  // arm_last_backward()).
  virtual bool overlaps_last_backward() const = 0;
  virtual void arm_last_backward() = 0;
  // Runs this process's micro-batch passes of a step, then makes the gradients and `step_loss`
  // (the step scalars' kStepLoss slot, on the device) the step's over every process. A failure
  // in the passes propagates (ranks: after every rank has agreed on it; `can_halve`: this
  // process's micro-batch can halve).
  virtual void run(const std::function<void()>& passes, double* step_loss, bool can_halve) = 0;
  // summary.json "data_parallel" (null: one process).
  virtual nlohmann::json report() const = 0;
};

class LocalGradientSync final : public GradientSync {
 public:
  std::pair<int64_t, int64_t> rows(int64_t step_rows, int64_t) const override {
    return {0, step_rows};
  }
  int64_t most_rows(int64_t step_rows, int64_t) const override { return step_rows; }
  void plan(const ParamTable&, TensorView) override {}
  bool overlaps_last_backward() const override { return false; }
  void arm_last_backward() override {}
  void run(const std::function<void()>& passes, double*, bool) override { passes(); }
  nlohmann::json report() const override { return nullptr; }
};

class RankGradientSync final : public GradientSync {
 public:
  explicit RankGradientSync(GradientReducer& reducer) : reducer_(reducer) {}

  std::pair<int64_t, int64_t> rows(int64_t step_rows, int64_t group_rows) const override {
    return reducer_.rows(step_rows, group_rows);
  }
  int64_t most_rows(int64_t step_rows, int64_t group_rows) const override {
    return reducer_.most_rows(step_rows, group_rows);
  }
  void plan(const ParamTable& params, TensorView grads) override { reducer_.plan(params, grads); }
  bool overlaps_last_backward() const override { return true; }
  void arm_last_backward() override { reducer_.arm(); }
  void run(const std::function<void()>& passes, double* step_loss, bool can_halve) override;
  nlohmann::json report() const override { return reducer_.report(); }

 private:
  GradientReducer& reducer_;
};

}  // namespace ftune
