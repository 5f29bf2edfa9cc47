// Classification metrics streamed over any number of rows in fixed memory: a k x k confusion
// matrix up to kMaxConfusionLabels labels, per-class counts (true, predicted, both: O(k)) past
// that, which give accuracy, per-class and macro precision / recall / F1, binary F1 of class 1,
// MCC and mean loss alike; and histograms of per-class scores for ROC-AUC, average precision and
// decision thresholds.
//
// Scores: with two labels s = logit[1] - logit[0], the log-odds of class 1; with k > 2 labels
// (up to kMaxAucLabels), one score per class c, s_c = logit[c] - log sum_{j != c} exp(logit[j]),
// the log-odds of softmax P(c) (monotone in P(c), so one-vs-rest AUCs equal sklearn's on
// predict_proba). Each score goes into a histogram of 2^16 bins of width 2^-11 over (-16, 16];
// bin i holds s in (e_i, e_i+1] with e_i = -16 + i 2^-11 (bin 0 also takes s <= -16 and NaN, the
// last bin s > 16): 1 MiB per class (binary: 1 MiB in all), whatever the number of rows.
// Pairs of a positive and a negative row in the same bin count half, so a histogram ROC-AUC
// differs from the exact one (sorting all scores, ties half) by at most
//   roc_auc_max_error() = 0.5 * sum_b pos_b neg_b / (P N),
// which the object reports. It is about 0.5 * 2^-11 * integral(f_pos f_neg) for score densities f:
// 8e-7 .. 8e-5 on the realistic distributions of the tests (50k rows), with the actual error
// 1e-8 .. 1e-6; only scores packed within ~0.1 of each other (an untrained model) push the bound
// towards 1e-3.
// Binary decisions: "predict 1 iff s > margin", i.e. iff P(1) = sigmoid(s) > sigmoid(margin); the
// default margin 0 (probability 0.5) is the argmax rule. Thresholds are bin edges, so metrics at a
// threshold are exact, not interpolated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/config_choices.h"

namespace ftune {

// Which data a metrics object summarises. Only validation metrics may choose a threshold: a
// threshold tuned on the test split would report an optimistic test score.
enum class EvalSplit { Unspecified, Train, Validation, Test };

// What a chosen binary threshold maximises: ThresholdMetric (train/config_choices.h).
// "f1" | "mcc" | "accuracy"; anything else raises InputError naming `key`.
ThresholdMetric parse_threshold_metric(const std::string& name, const std::string& key);
const char* threshold_metric_name(ThresholdMetric metric);

// A binary decision threshold: predict class 1 iff logit[1] - logit[0] > margin.
struct BinaryThreshold {
  double margin = 0;            // on the logit difference (a histogram bin edge)
  double probability = 0.5;     // the same threshold on P(class 1): sigmoid(margin)
  std::string chosen_by;        // "f1" / "mcc" / "accuracy" on validation data, or "given"
  double validation_value = 0;  // the chosen_by metric on the validation data at this threshold
};

struct ClassTotals;  // per-class row counts (metrics.cc)

class ClassificationMetrics {
 public:
  static constexpr int64_t kScoreBins = int64_t{1} << 16;
  static constexpr double kScoreRange = 16.0;   // bins cover s in (-16, 16]
  static constexpr int64_t kMaxAucLabels = 16;  // more labels: no AUC / AP (memory 1 MiB a label)
  // More labels: no k x k confusion matrix (memory and JSON grow as k^2; 100k labels would need
  // 80 GB), per-class counts instead.
  static constexpr int64_t kMaxConfusionLabels = 100;

  explicit ClassificationMetrics(int64_t num_labels, EvalSplit split = EvalSplit::Unspecified);

  // One row: its logits (num_labels values) and true label (-100 rows are ignored; a label outside
  // [0, num_labels) raises InputError).
  void add(const float* logits, int32_t label);
  // `rows` rows of logits (rows, num_labels) and labels (rows).
  void add_batch(const float* logits, const int32_t* labels, int64_t rows);
  void add_loss(double loss_sum, int64_t rows);
  // Adds another object's rows and loss (same num_labels): streaming in chunks equals one pass.
  void merge(const ClassificationMetrics& other);
  // Its counts as one flat vector (confusion, histograms, rows, loss rows) next to its loss sum,
  // and back: summing the vectors of several objects element by element and their loss sums is
  // merge() (the ranks of a data-parallel evaluation sum them: train/evaluate.h).
  std::vector<int64_t> counts() const;
  double loss_sum() const { return loss_sum_; }
  void set_counts(const std::vector<int64_t>& counts, double loss_sum);

  int64_t num_labels() const { return k_; }
  EvalSplit split() const { return split_; }
  int64_t count() const { return count_; }
  // [true][predicted]; empty past kMaxConfusionLabels labels.
  const std::vector<int64_t>& confusion() const { return confusion_; }

  // Argmax decisions (binary: threshold 0.5).
  double accuracy() const;
  double precision(int64_t cls) const;
  double recall(int64_t cls) const;
  double f1(int64_t cls) const;
  double macro_precision() const;
  double macro_recall() const;
  double macro_f1() const;
  double mcc() const;  // Matthews correlation (multi-class form, Gorodkin 2004); 0 if undefined
  double mean_loss() const;

  // Whether the score histograms are kept (2 <= num_labels <= kMaxAucLabels).
  bool has_auc() const { return slots_ > 0; }
  // Binary: ROC-AUC of class 1. k > 2: the macro average of the one-vs-rest AUCs (sklearn's
  // roc_auc_score(multi_class="ovr", average="macro")). NaN when a class has no rows or none
  // outside it; InternalError without histograms.
  double roc_auc() const;
  double roc_auc(int64_t cls) const;  // one-vs-rest ROC-AUC of class `cls`
  double roc_auc_max_error() const;   // bound on |roc_auc() - exact|
  // sklearn's average_precision_score on the binned scores: binary of class 1; k > 2 the macro
  // average over classes of the one-vs-rest APs.
  double average_precision() const;
  double average_precision(int64_t cls) const;

  // Binary only, validation metrics only (InternalError otherwise; InputError with no rows): the
  // threshold maximising `metric` over all bin edges in (-16, 16). Among the edges giving the best
  // confusion matrix, the middle one (farthest from the validation rows on either side).
  BinaryThreshold best_threshold(ThresholdMetric metric = ThresholdMetric::F1) const;
  // A threshold given on P(class 1), e.g. 0.5, snapped to the nearest bin edge.
  static BinaryThreshold threshold_at_probability(double probability);
  // The 2 x 2 confusion matrix [true][predicted] of "predict 1 iff s > threshold.margin".
  std::vector<int64_t> confusion_at(const BinaryThreshold& threshold) const;

  // {"rows", "loss", "accuracy", "macro_precision", "macro_recall", "macro_f1", "mcc",
  //  "confusion" (up to kMaxConfusionLabels labels)}, and for two labels also (at threshold 0.5)
  //  "precision", "recall", "f1" (of class 1); with histograms "roc_auc", "roc_auc_max_error",
  //  "average_precision" (binary) or "macro_roc_auc", "macro_roc_auc_max_error",
  //  "macro_average_precision" (k > 2). NaN values become null.
  nlohmann::json to_json() const;
  // The same plus "at_threshold": {"threshold" (probability), "margin", "chosen_by",
  // "validation_value", "accuracy", "precision", "recall", "f1", "macro_f1", "mcc", "confusion"}.
  nlohmann::json to_json(const BinaryThreshold& threshold) const;

 private:
  void require_binary(const char* what) const;
  void require_auc() const;
  static int64_t edge_index(double margin);
  // Histogram slot of a class: binary keeps class 1 only (slot 0), k > 2 one slot per class.
  int64_t slot_of(int64_t cls) const { return k_ == 2 ? 0 : cls; }
  const int64_t* pos(int64_t slot) const { return hist_.data() + (2 * slot + 1) * kScoreBins; }
  const int64_t* neg(int64_t slot) const { return hist_.data() + 2 * slot * kScoreBins; }
  double slot_auc(int64_t slot) const;
  double slot_auc_max_error(int64_t slot) const;
  double slot_average_precision(int64_t slot) const;

  bool dense() const { return k_ <= kMaxConfusionLabels; }
  ClassTotals totals() const;

  int64_t k_;
  EvalSplit split_;
  std::vector<int64_t> confusion_;  // [true][predicted] (dense())
  std::vector<int64_t> per_class_;  // (3, k): true, predicted, both (!dense())
  int64_t slots_ = 0;               // score histograms kept: 1 (binary), k, or 0
  std::vector<int64_t> hist_;       // (slots, 2 [other, this class], kScoreBins) row counts
  int64_t count_ = 0;
  double loss_sum_ = 0;
  int64_t loss_rows_ = 0;
};

}  // namespace ftune
