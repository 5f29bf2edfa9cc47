// Classification metrics accumulated in a confusion matrix, so memory does not grow with the
// dataset: accuracy, per-class precision / recall / F1, macro-F1, binary F1 of class 1, MCC, and
// the mean loss.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace ftune {

class ClassificationMetrics {
 public:
  explicit ClassificationMetrics(int64_t num_labels);

  // One row: its logits (num_labels values) and true label (-100 rows are ignored).
  void add(const float* logits, int32_t label);
  void add_loss(double loss_sum, int64_t rows);

  int64_t count() const { return count_; }
  double accuracy() const;
  double precision(int64_t cls) const;
  double recall(int64_t cls) const;
  double f1(int64_t cls) const;
  double macro_f1() const;
  double mcc() const;  // Matthews correlation (multi-class form, Gorodkin 2004)
  double mean_loss() const;
  // {"loss", "accuracy", "macro_f1", "mcc", "f1" (binary: of class 1), "confusion"}
  nlohmann::json to_json() const;

 private:
  int64_t k_;
  std::vector<int64_t> confusion_;  // [true][predicted]
  int64_t count_ = 0;
  double loss_sum_ = 0;
  int64_t loss_rows_ = 0;
};

}  // namespace ftune
