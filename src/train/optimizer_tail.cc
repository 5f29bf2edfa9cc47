// The optimizer tail of a step (see optimizer_tail.h).
#include "train/optimizer_tail.h"

#include <spdlog/spdlog.h>

#include <limits>

#include "optim/step_scalars.h"

namespace ftune {

void OptimizerTail::run(double lr) {
  const TensorView scalars = adamw_.step_scalars();
  const float loss_scale = scaler_.scale();  // 1 unless fp16
  const SequenceClassifier::OptimizerShadow shadow = clf_.optimizer_shadow();
  adamw_.set_learning_rate(static_cast<float>(lr));
  const auto tail = [&] {
    step_scalars_finish(scalars, clf_.trainable_grads(), tc_.max_grad_norm,
                        tc_.max_nonfinite_steps, loss_scale,
                        scaler_.enabled() && !scaler_.exhausted());
    adamw_.apply_scheduled(clf_.trainable_values(), clf_.trainable_grads(), shadow.view,
                           shadow.offset);
  };
  run_graphed_or_eager(graphs_, !scaler_.enabled(), kOptimizerTailGraphKey, tail);
  clf_.weights_updated(shadow.view.defined());
}

std::optional<int64_t> OptimizerTail::follow_loss_scale(int64_t step) {
  const StepScalarValues v = read_step_scalars(adamw_.step_scalars());
  const float scale = scaler_.scale();
  if (v[kScaleOverflow] != 0.0) {
    scaler_.update(std::numeric_limits<double>::infinity());
    spdlog::info("step {}: fp16 gradients overflow at loss scale {}; step skipped, scale now {}",
                 step + 1, scale, scaler_.scale());
    return static_cast<int64_t>(v[kSkippedSteps]);
  }
  if (v[kStepOk] != 0.0) scaler_.update(v[kGradNorm] * scale);
  return std::nullopt;
}

}  // namespace ftune
