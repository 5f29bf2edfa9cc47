// The micro-batch passes of one optimizer step (see micro_batch_pass.h).
#include "train/micro_batch_pass.h"

#include <cmath>

#include "optim/step_scalars.h"

namespace ftune {

double loss_weight(const std::vector<int32_t>& labels, size_t begin, size_t end,
                   const std::vector<float>& class_weights) {
  double total = 0.0;
  for (size_t i = begin; i < end; ++i)
    if (labels[i] >= 0) total += class_weights.empty() ? 1.0f : class_weights[labels[i]];
  return total;
}

double rows_loss_weight(const Batch& batch, int64_t row0, int64_t rows,
                        const std::vector<float>& class_weights) {
  if (batch.token_labels.empty())
    return loss_weight(batch.labels, static_cast<size_t>(row0), static_cast<size_t>(row0 + rows),
                       class_weights);
  // A causal LM's mean is over the counted tokens (transformers' num_items_in_batch).
  return loss_weight(batch.token_labels, static_cast<size_t>(row0 * batch.seq_len),
                     static_cast<size_t>((row0 + rows) * batch.seq_len), {});
}

MicroBatchPasses::MicroBatchPasses(const MicroBatchSetup& setup, const Batch& step_batch,
                                   const std::vector<int32_t>& positions,
                                   std::vector<std::pair<int64_t, int64_t>> cuts, int64_t step,
                                   float loss_scale, TensorView step_scalars,
                                   const StepFaults& faults)
    : setup_(setup),
      batch_(step_batch),
      positions_(positions),
      cuts_(std::move(cuts)),
      step_(step),
      loss_scale_(loss_scale),
      scalars_(step_scalars),
      faults_(faults),
      step_weight_(rows_loss_weight(step_batch, 0, step_batch.size, setup.loss.class_weights)) {}

MicroParams MicroBatchPasses::micro_params(int64_t row0, int64_t rows) const {
  const double share =
      rows_loss_weight(batch_, row0, rows, setup_.loss.class_weights) / step_weight_;
  MicroParams m;
  m.row0 = static_cast<uint64_t>(row0);
  m.offset = static_cast<uint32_t>(step_);
  m.grad_scale = static_cast<float>(share) * loss_scale_;
  m.loss_share = faults_.nonfinite_loss() && row0 == 0 ? std::nan("") : share;
  return m;
}

void MicroBatchPasses::stage(size_t cut) {
  const auto [row0, rows] = cuts_[cut];
  slot_ = setup_.staging.stage(batch_, positions_, row0, rows, micro_params(row0, rows));
}

void MicroBatchPasses::begin() {
  setup_.clf.zero_grad();
  step_scalars_begin(scalars_);
  if (!cuts_.empty()) stage(0);
}

void MicroBatchPasses::run(int64_t run_micro_batches) {
  SequenceClassifier& clf = setup_.clf;
  for (size_t cut = 0; cut < cuts_.size(); ++cut) {
    faults_.at_micro_batch_start(run_micro_batches + passes_);
    const auto [row0, rows] = cuts_[cut];
    const StagedInputs in = setup_.staging.acquire(slot_);
    clf.use_inputs(in.inputs, in.labels, in.targets);
    work_.add(flop_model(setup_.model), batch_, row0, rows, in.inputs.T, in.inputs.packed());
    const DropoutPlan dropout{true, setup_.seed, static_cast<uint32_t>(step_),
                              static_cast<uint64_t>(row0), setup_.stream_seq, in.micro};
    clf.prepare_forward(setup_.loss);  // nothing lazy left inside the region
    const bool last = cut + 1 == cuts_.size();
    const bool failing = faults_.fails_allocation(cut, cuts_.size());
    // Data-parallel: the last backward's finished layers start their gradients' reduction.
    const bool overlap = last && setup_.sync.overlaps_last_backward();
    if (overlap) setup_.sync.arm_last_backward();
    const auto region = [&] {
      clf.forward(dropout);
      faults_.after_forward(failing);
      const TensorView micro_loss = clf.loss(setup_.loss);
      step_scalars_add_loss(scalars_, micro_loss, 0.0, &in.micro->loss_share);
      clf.backward(dropout, 1.0f, &in.micro->grad_scale);
      faults_.after_backward(failing);
    };
    // Eager where a replay would skip host code the region needs (the injected failure, the
    // overlap's layer reports) and for packed micro-batches (train/step_graphs.h).
    run_graphed_or_eager(setup_.graphs, !failing && !in.inputs.packed() && !overlap,
                         MicroGraphKey{rows, in.inputs.T}, region);
    if (!last) stage(cut + 1);
    ++passes_;
  }
}

}  // namespace ftune
