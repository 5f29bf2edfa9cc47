// Confusion-matrix metrics, the binary score histogram (ROC-AUC, average precision) and the
// threshold sweep over its bin edges.
#include "train/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace ftune {
// Per-class totals: rows of true class c (t), predicted as c (p), both (d), and all rows (s):
// everything the row metrics need (accuracy, per-class and macro precision / recall / F1, MCC),
// in O(k) memory whatever the number of labels.
struct ClassTotals {
  std::vector<double> t, p, d;
  double s = 0;

  int64_t k() const { return static_cast<int64_t>(t.size()); }
  double accuracy() const {
    double right = 0;
    for (double v : d) right += v;
    return s > 0 ? right / s : 0.0;
  }
  double precision(int64_t cls) const { return p[cls] > 0 ? d[cls] / p[cls] : 0.0; }
  double recall(int64_t cls) const { return t[cls] > 0 ? d[cls] / t[cls] : 0.0; }
  double f1(int64_t cls) const {
    const double pr = precision(cls), r = recall(cls);
    return pr + r > 0 ? 2 * pr * r / (pr + r) : 0.0;
  }
  template <typename F>
  double macro(F per_class) const {
    double sum = 0;
    for (int64_t c = 0; c < k(); ++c) sum += per_class(c);
    return k() ? sum / k() : 0.0;
  }
  double mcc() const {
    // MCC = (c s - sum_k p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2)), with c the correct
    // rows, s all rows, t_k rows of true class k, p_k rows predicted k. A constant prediction (or
    // a single true class) makes a factor zero: MCC is then 0, as in sklearn.
    double correct = 0, pt = 0, pp = 0, tt = 0;
    for (int64_t i = 0; i < k(); ++i) {
      correct += d[i];
      pt += p[i] * t[i];
      pp += p[i] * p[i];
      tt += t[i] * t[i];
    }
    const double denom = std::sqrt((s * s - pp) * (s * s - tt));
    return denom > 0 ? (correct * s - pt) / denom : 0.0;
  }
};

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kBinsPerUnit =
    double(ClassificationMetrics::kScoreBins) / (2 * ClassificationMetrics::kScoreRange);  // 2048

// Bin of score s: i such that e_i < s <= e_i+1, clamped; NaN goes to bin 0 (as argmax predicts 0).
int64_t score_bin(double s) {
  const double x = (s + ClassificationMetrics::kScoreRange) * kBinsPerUnit;
  if (!(x > 1)) return 0;  // also NaN
  if (x > double(ClassificationMetrics::kScoreBins)) return ClassificationMetrics::kScoreBins - 1;
  return static_cast<int64_t>(std::ceil(x)) - 1;
}

double edge_margin(int64_t j) {
  return -ClassificationMetrics::kScoreRange + double(j) / kBinsPerUnit;
}

// A k x k confusion matrix c[true * k + predicted].
struct Confusion {
  const std::vector<int64_t>& c;
  int64_t k;

  int64_t at(int64_t t, int64_t p) const { return c[t * k + p]; }
  ClassTotals totals() const {
    ClassTotals out{std::vector<double>(k, 0), std::vector<double>(k, 0), std::vector<double>(k, 0),
                    0};
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const double n = double(at(i, j));
        out.t[i] += n;
        out.p[j] += n;
        out.s += n;
        if (i == j) out.d[i] += n;
      }
    return out;
  }
  double accuracy() const { return totals().accuracy(); }
  double precision(int64_t cls) const { return totals().precision(cls); }
  double recall(int64_t cls) const { return totals().recall(cls); }
  double f1(int64_t cls) const { return totals().f1(cls); }
  double mcc() const { return totals().mcc(); }
  template <typename F>
  double macro(F per_class) const {
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += per_class(i);
    return k ? sum / k : 0.0;
  }

  nlohmann::json matrix_json() const {
    nlohmann::json conf = nlohmann::json::array();
    for (int64_t i = 0; i < k; ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (int64_t j = 0; j < k; ++j) row.push_back(at(i, j));
      conf.push_back(row);
    }
    return conf;
  }
};

// NaN is not JSON: write null.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

double metric_of(const Confusion& c, ThresholdMetric metric) {
  switch (metric) {
    case ThresholdMetric::F1:
      return c.f1(1);
    case ThresholdMetric::Mcc:
      return c.mcc();
    case ThresholdMetric::Accuracy:
      return c.accuracy();
  }
  return 0;
}

}  // namespace

ThresholdMetric parse_threshold_metric(const std::string& name, const std::string& key) {
  if (auto metric = find_choice(kThresholdMetricNames, name)) return *metric;
  throw InputError(fmt::format("{}: unknown threshold metric \"{}\" (expected {})", key, name,
                               either(choice_words(kThresholdMetricNames))));
}

const char* threshold_metric_name(ThresholdMetric metric) {
  return choice_name(kThresholdMetricNames, metric).data();
}

ClassificationMetrics::ClassificationMetrics(int64_t num_labels, EvalSplit split)
    : k_(num_labels), split_(split) {
  FTUNE_ASSERT(num_labels >= 1, "num_labels {} < 1", num_labels);
  if (dense())
    confusion_.assign(static_cast<size_t>(k_ * k_), 0);
  else
    per_class_.assign(static_cast<size_t>(3 * k_), 0);
  if (k_ >= 2 && k_ <= kMaxAucLabels) {
    slots_ = k_ == 2 ? 1 : k_;
    hist_.assign(static_cast<size_t>(slots_ * 2 * kScoreBins), 0);
  }
}

void ClassificationMetrics::add(const float* logits, int32_t label) {
  if (label < 0) return;
  if (label >= k_)
    throw InputError(
        fmt::format("label {} is out of range for a model with {} labels (expected "
                    "0..{}, or -100 to ignore a row)",
                    label, k_, k_ - 1));
  int64_t best = 0;
  for (int64_t c = 1; c < k_; ++c)
    if (logits[c] > logits[best]) best = c;
  if (dense()) {
    ++confusion_[label * k_ + best];
  } else {
    ++per_class_[label];                              // true
    ++per_class_[k_ + best];                          // predicted
    if (best == label) ++per_class_[2 * k_ + label];  // both
  }
  ++count_;
  if (slots_ == 1) {
    const int64_t b = score_bin(double(logits[1]) - double(logits[0]));
    ++hist_[(2 * 0 + (label == 1)) * kScoreBins + b];
  } else if (slots_ > 1) {
    // s_c = logit_c - logsumexp(logits of the other classes), in double.
    for (int64_t c = 0; c < k_; ++c) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t o = 0; o < k_; ++o)
        if (o != c) m = std::max(m, double(logits[o]));
      double sum = 0;
      for (int64_t o = 0; o < k_; ++o)
        if (o != c) sum += std::exp(double(logits[o]) - m);
      const int64_t b = score_bin(double(logits[c]) - (m + std::log(sum)));
      ++hist_[(2 * c + (label == c)) * kScoreBins + b];
    }
  }
}

void ClassificationMetrics::add_batch(const float* logits, const int32_t* labels, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) add(logits + r * k_, labels[r]);
}

void ClassificationMetrics::add_loss(double loss_sum, int64_t rows) {
  loss_sum_ += loss_sum;
  loss_rows_ += rows;
}

void ClassificationMetrics::merge(const ClassificationMetrics& other) {
  FTUNE_ASSERT(other.k_ == k_, "merging metrics of {} labels into metrics of {}", other.k_, k_);
  for (size_t i = 0; i < confusion_.size(); ++i) confusion_[i] += other.confusion_[i];
  for (size_t i = 0; i < per_class_.size(); ++i) per_class_[i] += other.per_class_[i];
  for (size_t i = 0; i < hist_.size(); ++i) hist_[i] += other.hist_[i];
  count_ += other.count_;
  loss_sum_ += other.loss_sum_;
  loss_rows_ += other.loss_rows_;
}

std::vector<int64_t> ClassificationMetrics::counts() const {
  std::vector<int64_t> out(confusion_);
  out.insert(out.end(), per_class_.begin(), per_class_.end());
  out.insert(out.end(), hist_.begin(), hist_.end());
  out.push_back(count_);
  out.push_back(loss_rows_);
  return out;
}

void ClassificationMetrics::set_counts(const std::vector<int64_t>& counts, double loss_sum) {
  FTUNE_ASSERT(counts.size() == confusion_.size() + per_class_.size() + hist_.size() + 2,
               "{} counts for metrics of {} labels", counts.size(), k_);
  auto at = counts.begin();
  std::copy(at, at + static_cast<ptrdiff_t>(confusion_.size()), confusion_.begin());
  at += static_cast<ptrdiff_t>(confusion_.size());
  std::copy(at, at + static_cast<ptrdiff_t>(per_class_.size()), per_class_.begin());
  at += static_cast<ptrdiff_t>(per_class_.size());
  std::copy(at, at + static_cast<ptrdiff_t>(hist_.size()), hist_.begin());
  at += static_cast<ptrdiff_t>(hist_.size());
  count_ = *at++;
  loss_rows_ = *at;
  loss_sum_ = loss_sum;
}

ClassTotals ClassificationMetrics::totals() const {
  if (dense()) return Confusion{confusion_, k_}.totals();
  ClassTotals out{std::vector<double>(k_), std::vector<double>(k_), std::vector<double>(k_), 0};
  for (int64_t c = 0; c < k_; ++c) {
    out.t[c] = double(per_class_[c]);
    out.p[c] = double(per_class_[k_ + c]);
    out.d[c] = double(per_class_[2 * k_ + c]);
    out.s += out.t[c];
  }
  return out;
}

double ClassificationMetrics::accuracy() const {
  return totals().accuracy();
}
double ClassificationMetrics::precision(int64_t cls) const {
  return totals().precision(cls);
}
double ClassificationMetrics::recall(int64_t cls) const {
  return totals().recall(cls);
}
double ClassificationMetrics::f1(int64_t cls) const {
  return totals().f1(cls);
}
double ClassificationMetrics::macro_precision() const {
  const ClassTotals c = totals();
  return c.macro([&](int64_t i) { return c.precision(i); });
}
double ClassificationMetrics::macro_recall() const {
  const ClassTotals c = totals();
  return c.macro([&](int64_t i) { return c.recall(i); });
}
double ClassificationMetrics::macro_f1() const {
  const ClassTotals c = totals();
  return c.macro([&](int64_t i) { return c.f1(i); });
}
double ClassificationMetrics::mcc() const {
  return totals().mcc();
}

double ClassificationMetrics::mean_loss() const {
  return loss_rows_ ? loss_sum_ / loss_rows_ : 0.0;
}

void ClassificationMetrics::require_binary(const char* what) const {
  FTUNE_ASSERT(k_ == 2, "{} needs two labels, the metrics have {}", what, k_);
}

void ClassificationMetrics::require_auc() const {
  FTUNE_ASSERT(slots_ > 0, "ROC-AUC / average precision need 2..{} labels, the metrics have {}",
               kMaxAucLabels, k_);
}

double ClassificationMetrics::slot_auc(int64_t slot) const {
  // AUC = P(s_pos > s_neg) + P(s_pos = s_neg) / 2, over bins: each positive beats the negatives
  // of lower bins and ties those of its own bin.
  const int64_t *p = pos(slot), *n = neg(slot);
  double wins = 0, negatives_below = 0, positives = 0;
  for (int64_t b = 0; b < kScoreBins; ++b) {
    wins += double(p[b]) * (negatives_below + 0.5 * double(n[b]));
    negatives_below += double(n[b]);
    positives += double(p[b]);
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  return wins / (positives * negatives_below);
}

double ClassificationMetrics::slot_auc_max_error(int64_t slot) const {
  const int64_t *p = pos(slot), *n = neg(slot);
  double same_bin = 0, positives = 0, negatives = 0;
  for (int64_t b = 0; b < kScoreBins; ++b) {
    same_bin += double(p[b]) * double(n[b]);
    positives += double(p[b]);
    negatives += double(n[b]);
  }
  if (positives == 0 || negatives == 0) return kNaN;
  return 0.5 * same_bin / (positives * negatives);
}

double ClassificationMetrics::slot_average_precision(int64_t slot) const {
  // AP = sum_n (R_n - R_n-1) P_n over thresholds from the highest score down (sklearn), with the
  // rows of one bin entering together as tied scores do.
  const int64_t *p = pos(slot), *n = neg(slot);
  double positives = 0;
  for (int64_t b = 0; b < kScoreBins; ++b) positives += double(p[b]);
  if (positives == 0) return kNaN;
  double ap = 0, tp = 0, fp = 0;
  for (int64_t b = kScoreBins - 1; b >= 0; --b) {
    if (!p[b] && !n[b]) continue;
    tp += double(p[b]);
    fp += double(n[b]);
    if (p[b]) ap += (double(p[b]) / positives) * (tp / (tp + fp));
  }
  return ap;
}

double ClassificationMetrics::roc_auc() const {
  require_auc();
  if (k_ == 2) return slot_auc(0);
  double sum = 0;
  for (int64_t c = 0; c < k_; ++c) sum += slot_auc(c);  // NaN if any class is undefined
  return sum / double(k_);
}

double ClassificationMetrics::roc_auc(int64_t cls) const {
  require_auc();
  FTUNE_ASSERT(cls >= 0 && cls < k_, "class {} of {}", cls, k_);
  // Binary: class 0's score is -s, which reverses every comparison and keeps ties.
  if (k_ == 2) return cls == 1 ? slot_auc(0) : 1 - slot_auc(0);
  return slot_auc(cls);
}

double ClassificationMetrics::roc_auc_max_error() const {
  require_auc();
  if (k_ == 2) return slot_auc_max_error(0);
  double sum = 0;  // |mean of errors| <= mean of the bounds
  for (int64_t c = 0; c < k_; ++c) sum += slot_auc_max_error(c);
  return sum / double(k_);
}

double ClassificationMetrics::average_precision() const {
  require_auc();
  if (k_ == 2) return slot_average_precision(0);
  double sum = 0;
  for (int64_t c = 0; c < k_; ++c) sum += slot_average_precision(c);
  return sum / double(k_);
}

double ClassificationMetrics::average_precision(int64_t cls) const {
  require_auc();
  FTUNE_ASSERT(cls >= 0 && cls < k_, "class {} of {}", cls, k_);
  FTUNE_ASSERT(k_ > 2 || cls == 1, "binary average precision is kept for class 1 only");
  return slot_average_precision(slot_of(cls));
}

int64_t ClassificationMetrics::edge_index(double margin) {
  const double x = std::round((margin + kScoreRange) * kBinsPerUnit);
  if (!(x >= 1)) return 1;
  if (x > double(kScoreBins - 1)) return kScoreBins - 1;
  return static_cast<int64_t>(x);
}

BinaryThreshold ClassificationMetrics::threshold_at_probability(double probability) {
  if (!(probability > 0 && probability < 1))
    throw InputError(
        fmt::format("decision threshold {} is not a probability in (0, 1)", probability));
  const double margin = edge_margin(edge_index(std::log(probability / (1 - probability))));
  return {margin, 1 / (1 + std::exp(-margin)), "given", kNaN};
}

std::vector<int64_t> ClassificationMetrics::confusion_at(const BinaryThreshold& threshold) const {
  require_binary("a decision threshold");
  // Edge j: rows in bins >= j have s > e_j and are predicted 1.
  const int64_t j = edge_index(threshold.margin);
  std::vector<int64_t> c(4, 0);  // [true][predicted]
  const int64_t *p = pos(0), *n = neg(0);
  for (int64_t b = 0; b < kScoreBins; ++b) {
    c[0 * 2 + (b >= j)] += n[b];
    c[1 * 2 + (b >= j)] += p[b];
  }
  return c;
}

BinaryThreshold ClassificationMetrics::best_threshold(ThresholdMetric metric) const {
  require_binary("best_threshold");
  FTUNE_ASSERT(split_ == EvalSplit::Validation,
               "a decision threshold may only be chosen on validation metrics");
  if (count_ == 0) throw InputError("cannot choose a decision threshold: no validation rows");
  // Sweep the edges upwards: at edge j, true positives are the positives in bins >= j.
  const int64_t *p = pos(0), *n = neg(0);
  int64_t tp = 0, fp = 0;
  for (int64_t b = 0; b < kScoreBins; ++b) {
    tp += p[b];
    fp += n[b];
  }
  const int64_t positives = tp, negatives = fp;
  double best = -std::numeric_limits<double>::infinity();
  int64_t best_lo = 1, best_hi = 1, best_tp = -1, best_fp = -1;
  std::vector<int64_t> c(4);
  for (int64_t j = 1; j < kScoreBins; ++j) {
    tp -= p[j - 1];
    fp -= n[j - 1];
    if (tp == best_tp && fp == best_fp) {  // same decisions as the best: widen its plateau
      best_hi = j;
      continue;
    }
    c = {negatives - fp, fp, positives - tp, tp};
    const double v = metric_of(Confusion{c, 2}, metric);
    if (v > best) {
      best = v;
      best_lo = best_hi = j;
      best_tp = tp;
      best_fp = fp;
    }
  }
  const double margin = edge_margin((best_lo + best_hi) / 2);
  return {margin, 1 / (1 + std::exp(-margin)), threshold_metric_name(metric), best};
}

nlohmann::json ClassificationMetrics::to_json() const {
  nlohmann::json j;
  j["rows"] = count_;
  j["loss"] = mean_loss();
  j["accuracy"] = accuracy();
  j["macro_precision"] = macro_precision();
  j["macro_recall"] = macro_recall();
  j["macro_f1"] = macro_f1();
  j["mcc"] = mcc();
  if (k_ == 2) {
    j["precision"] = precision(1);
    j["recall"] = recall(1);
    j["f1"] = f1(1);
  }
  if (has_auc()) {
    const std::string prefix = k_ == 2 ? "" : "macro_";
    j[prefix + "roc_auc"] = number(roc_auc());
    j[prefix + "roc_auc_max_error"] = number(roc_auc_max_error());
    j[prefix + "average_precision"] = number(average_precision());
  }
  // The k x k matrix up to kMaxConfusionLabels labels; past that it would outgrow everything else
  // (3,000 labels: 9 million numbers an evaluation), and the per-class counts stand in.
  if (dense()) j["confusion"] = Confusion{confusion_, k_}.matrix_json();
  return j;
}

nlohmann::json ClassificationMetrics::to_json(const BinaryThreshold& threshold) const {
  nlohmann::json j = to_json();
  const std::vector<int64_t> m = confusion_at(threshold);
  const Confusion c{m, 2};
  j["at_threshold"] = {{"threshold", threshold.probability},
                       {"margin", threshold.margin},
                       {"chosen_by", threshold.chosen_by},
                       {"validation_value", number(threshold.validation_value)},
                       {"accuracy", c.accuracy()},
                       {"precision", c.precision(1)},
                       {"recall", c.recall(1)},
                       {"f1", c.f1(1)},
                       {"macro_f1", c.macro([&](int64_t i) { return c.f1(i); })},
                       {"mcc", c.mcc()},
                       {"confusion", c.matrix_json()}};
  return j;
}

}  // namespace ftune
