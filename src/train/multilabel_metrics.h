// Multi-label classification metrics (training.loss multi_label_bce, HF's problem_type
// "multi_label_classification"): one sigmoid per label, a row may have any number of labels. Per
// label: ROC-AUC (exact: all scores sorted, ties counted half, as sklearn), precision, recall and
// F1 at a decision threshold; over labels: micro F1 (counts summed over labels) and macro F1 (the
// mean of the labels' F1), at probability 0.5 and at per-label thresholds. On validation data each
// label's threshold is the one maximising its F1 over its own scores (the midpoint between two
// adjacent distinct scores, so no validation row sits on it); the test split is scored at the
// thresholds chosen on validation. The object keeps each (row, label) score and 0/1 target:
// 5 bytes per row and label (50 MB for a million rows of 10 labels).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune {

class MultiLabelMetrics {
 public:
  explicit MultiLabelMetrics(std::vector<std::string> labels);

  // One row: its K logits and K targets (a target >= 0.5 counts as the label being present).
  void add(const float* logits, const float* targets);
  void add_loss(double loss_sum, int64_t rows);

  int64_t num_labels() const { return static_cast<int64_t>(labels_.size()); }
  const std::vector<std::string>& labels() const { return labels_; }
  int64_t count() const { return rows_; }
  double mean_loss() const;
  // What a data-parallel evaluation gathers over the ranks (train/evaluate.cc): the kept
  // (rows, K) logits and 0/1 targets, and the loss sum over its rows.
  const std::vector<float>& scores() const { return scores_; }
  const std::vector<uint8_t>& truth() const { return truth_; }
  double loss_sum() const { return loss_sum_; }
  int64_t loss_rows() const { return loss_rows_; }

  // Per-label logit thresholds maximising each label's F1 on these rows (validation only).
  std::vector<double> best_thresholds() const;
  // Metrics at logit thresholds (one per label; 0 = probability 0.5): {"rows", "loss",
  // "micro_f1", "macro_f1", "subset_accuracy", "macro_roc_auc", "per_label": [{"label",
  // "support", "precision", "recall", "f1", "roc_auc", "threshold"}]}.
  nlohmann::json to_json(const std::vector<double>& thresholds) const;
  // At 0.5, plus "at_threshold": the same at `chosen` (probabilities in "thresholds").
  nlohmann::json to_json_with(const std::vector<double>& chosen) const;

  double roc_auc(int64_t label) const;  // NaN when the label has no positive or no negative row

 private:
  std::vector<std::string> labels_;
  std::vector<float> scores_;   // (rows, K)
  std::vector<uint8_t> truth_;  // (rows, K)
  int64_t rows_ = 0;
  double loss_sum_ = 0;
  int64_t loss_rows_ = 0;
};

}  // namespace ftune
