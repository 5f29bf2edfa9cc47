// Evaluation's read-back of each batch's logits and loss without a host wait per batch (DESIGN
// principle 4): the copies of batch i go, in stream order after its forward pass, into one of two
// pinned host slots, and the host adds batch i to the metrics only when batch i + 1 has been
// queued, so the device always has a batch to compute while the host waits for the previous one.
//   push(logits, loss, labels)   compute stream: copy (rows, K) logits and the loss scalar into the
//                                next slot, record "copied"; the slot keeps the batch's labels
//   pop(metrics)                 host: wait for the oldest slot's "copied" (long done unless the
//                                device is behind), add its rows and loss to the metrics
// Batches reach the metrics in the order they were pushed, with the same values a synchronous
// read gives, so the merged metrics do not depend on this (train/evaluate.cc; tested on the CPU,
// where the copies are plain copies and the events no-ops). Nothing is read with to_host_scalar.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "train/metrics.h"
#include "train/multilabel_metrics.h"
#include "train/regression_metrics.h"

namespace ftune {

class EvalReadback {
 public:
  static constexpr int kSlots = 2;

  // Slots for batches of up to max_rows rows of num_labels logits, on `device`'s host side
  // (pinned memory and events on a GPU; allocated here, once per evaluation, not per batch).
  EvalReadback(Device device, int64_t max_rows, int64_t num_labels);
  ~EvalReadback();
  EvalReadback(const EvalReadback&) = delete;
  EvalReadback& operator=(const EvalReadback&) = delete;

  // logits (rows, K) f32 and loss (1) f32 on the device; labels: the batch's rows' labels; targets:
  // a score task's float targets (rows x K) or empty. Needs a free slot (pending() < kSlots).
  void push(TensorView logits, TensorView loss, std::vector<int32_t> labels,
            std::vector<float> targets = {});
  // Adds the oldest pushed batch to `metrics` (the loss weighted by its rows) and returns its rows;
  // 0 when none is pending. A single score (K = 1) with targets goes to `regression` when given,
  // else into binary `metrics` as the logit difference s (logits (0, s)) with label
  // [target >= 0.5] (a BCE score: P(1) = sigmoid(s)).
  // Multi-label rows (K targets each) go to `multi_label` when given.
  int64_t pop(ClassificationMetrics& metrics, RegressionMetrics* regression = nullptr,
              MultiLabelMetrics* multi_label = nullptr);
  int pending() const { return pending_; }

 private:
  Device device_;
  int64_t max_rows_, k_;
  std::array<float*, kSlots> host_{};  // (max_rows * K + 1): logits, then the loss
  std::vector<float> cpu_host_;
  std::array<void*, kSlots> copied_{};
  std::array<std::vector<int32_t>, kSlots> labels_{};
  std::array<std::vector<float>, kSlots> targets_{};
  int next_ = 0, pending_ = 0;
};

}  // namespace ftune
