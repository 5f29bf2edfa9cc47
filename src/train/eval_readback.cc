// Evaluation's asynchronous read-back of logits and loss (see eval_readback.h).
#include "train/eval_readback.h"

#include <cstring>

#include "core/error.h"
#include "core/memory.h"
#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

namespace ftune {

EvalReadback::EvalReadback(Device device, int64_t max_rows, int64_t num_labels)
    : device_(device), max_rows_(max_rows), k_(num_labels) {
  FTUNE_ASSERT(max_rows > 0 && num_labels > 0, "EvalReadback of {} rows of {} labels", max_rows,
               num_labels);
  const int64_t n = max_rows_ * k_ + 1;
  if (device_.is_cpu()) {
    cpu_host_.assign(static_cast<size_t>(n * kSlots), 0.0f);
    for (int k = 0; k < kSlots; ++k) host_[k] = cpu_host_.data() + k * n;
    return;
  }
#ifdef FTUNE_WITH_CUDA
  for (int k = 0; k < kSlots; ++k) {
    host_[k] = static_cast<float*>(cuda::host_alloc_pinned(static_cast<size_t>(n) * sizeof(float)));
    copied_[k] = cuda::event_create(device_);
  }
#else
  throw NotBuiltError("evaluation on a CUDA device, but ftune was built without CUDA");
#endif
}

EvalReadback::~EvalReadback() {
#ifdef FTUNE_WITH_CUDA
  if (device_.is_cpu()) return;
  try {  // a copy may still write a slot: wait for it before freeing (destructors do not throw)
    for (int k = 0; k < kSlots; ++k) {
      if (copied_[k]) cuda::event_synchronize(copied_[k]);
      if (host_[k]) cuda::host_free_pinned(host_[k]);
      if (copied_[k]) cuda::event_destroy(copied_[k]);
    }
  } catch (const std::exception&) {
  }
#endif
}

void EvalReadback::push(TensorView logits, TensorView loss, std::vector<int32_t> labels,
                        std::vector<float> targets) {
  const int64_t rows = static_cast<int64_t>(labels.size());
  FTUNE_ASSERT(pending_ < kSlots, "EvalReadback::push with both slots pending");
  FTUNE_ASSERT(rows <= max_rows_ && logits.dtype == DType::F32 && logits.shape == Shape({rows, k_}) &&
                   logits.is_contiguous() && loss.dtype == DType::F32 && loss.numel() == 1,
               "EvalReadback::push: logits {} and loss {} for {} rows of {} labels",
               logits.describe(), loss.describe(), rows, k_);
  const int k = next_;
  float* slot = host_[k];
  const size_t bytes = static_cast<size_t>(rows * k_) * sizeof(float);
  if (device_.is_cpu()) {
    std::memcpy(slot, logits.data, bytes);
    std::memcpy(slot + max_rows_ * k_, loss.data, sizeof(float));
  } else {
#ifdef FTUNE_WITH_CUDA
    // Both copies in stream order after the batch's kernels; the event marks the later one.
    cuda::copy_to_host_on_compute_stream(slot + max_rows_ * k_, device_, loss.data, sizeof(float),
                                         copied_[k]);
    cuda::copy_to_host_on_compute_stream(slot, device_, logits.data, bytes, copied_[k]);
#endif
  }
  labels_[k] = std::move(labels);
  targets_[k] = std::move(targets);
  next_ = (k + 1) % kSlots;
  ++pending_;
}

int64_t EvalReadback::pop(ClassificationMetrics& metrics, RegressionMetrics* regression,
                          MultiLabelMetrics* multi_label) {
  if (pending_ == 0) return 0;
  const int k = (next_ + kSlots - pending_) % kSlots;
#ifdef FTUNE_WITH_CUDA
  if (!device_.is_cpu()) cuda::event_synchronize(copied_[k]);
#endif
  const float* slot = host_[k];
  const int64_t rows = static_cast<int64_t>(labels_[k].size());
  const double loss_sum = double(slot[max_rows_ * k_]) * double(rows);
  const std::vector<float>& t = targets_[k];
  if (multi_label && !t.empty()) {
    FTUNE_ASSERT(static_cast<int64_t>(t.size()) == rows * k_, "{} targets for {} rows of {}",
                 t.size(), rows, k_);
    multi_label->add_loss(loss_sum, rows);
    for (int64_t r = 0; r < rows; ++r)
      if (labels_[k][r] >= 0) multi_label->add(slot + r * k_, t.data() + r * k_);
  } else if (k_ == 1 && !t.empty()) {
    FTUNE_ASSERT(static_cast<int64_t>(t.size()) == rows, "{} targets for {} rows", t.size(), rows);
    if (regression) {
      regression->add_loss(loss_sum, rows);
      regression->add_batch(slot, t.data(), rows);
    } else {
      metrics.add_loss(loss_sum, rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float pair[2] = {0.0f, slot[r]};
        metrics.add(pair, labels_[k][r] < 0 ? -100 : (t[r] >= 0.5f ? 1 : 0));
      }
    }
  } else {
    metrics.add_loss(loss_sum, rows);
    metrics.add_batch(slot, labels_[k].data(), rows);
  }
  --pending_;
  return rows;
}

}  // namespace ftune
