// Confusion-matrix metrics.
#include "train/metrics.h"

#include <cmath>

namespace ftune {

ClassificationMetrics::ClassificationMetrics(int64_t num_labels)
    : k_(num_labels), confusion_(static_cast<size_t>(num_labels * num_labels), 0) {}

void ClassificationMetrics::add(const float* logits, int32_t label) {
  if (label < 0) return;
  int64_t best = 0;
  for (int64_t c = 1; c < k_; ++c)
    if (logits[c] > logits[best]) best = c;
  ++confusion_[label * k_ + best];
  ++count_;
}

void ClassificationMetrics::add_loss(double loss_sum, int64_t rows) {
  loss_sum_ += loss_sum;
  loss_rows_ += rows;
}

double ClassificationMetrics::accuracy() const {
  int64_t right = 0;
  for (int64_t c = 0; c < k_; ++c) right += confusion_[c * k_ + c];
  return count_ ? double(right) / count_ : 0.0;
}

double ClassificationMetrics::precision(int64_t cls) const {
  int64_t predicted = 0;
  for (int64_t t = 0; t < k_; ++t) predicted += confusion_[t * k_ + cls];
  return predicted ? double(confusion_[cls * k_ + cls]) / predicted : 0.0;
}

double ClassificationMetrics::recall(int64_t cls) const {
  int64_t actual = 0;
  for (int64_t p = 0; p < k_; ++p) actual += confusion_[cls * k_ + p];
  return actual ? double(confusion_[cls * k_ + cls]) / actual : 0.0;
}

double ClassificationMetrics::f1(int64_t cls) const {
  const double p = precision(cls), r = recall(cls);
  return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

double ClassificationMetrics::macro_f1() const {
  double s = 0;
  for (int64_t c = 0; c < k_; ++c) s += f1(c);
  return k_ ? s / k_ : 0.0;
}

double ClassificationMetrics::mcc() const {
  // MCC = (c s - sum_k p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2))
  std::vector<double> t(k_, 0), p(k_, 0);
  double c = 0, s = 0;
  for (int64_t i = 0; i < k_; ++i)
    for (int64_t j = 0; j < k_; ++j) {
      const double n = double(confusion_[i * k_ + j]);
      t[i] += n;
      p[j] += n;
      s += n;
      if (i == j) c += n;
    }
  double pt = 0, pp = 0, tt = 0;
  for (int64_t i = 0; i < k_; ++i) {
    pt += p[i] * t[i];
    pp += p[i] * p[i];
    tt += t[i] * t[i];
  }
  const double denom = std::sqrt((s * s - pp) * (s * s - tt));
  return denom > 0 ? (c * s - pt) / denom : 0.0;
}

double ClassificationMetrics::mean_loss() const {
  return loss_rows_ ? loss_sum_ / loss_rows_ : 0.0;
}

nlohmann::json ClassificationMetrics::to_json() const {
  nlohmann::json j;
  j["rows"] = count_;
  j["loss"] = mean_loss();
  j["accuracy"] = accuracy();
  j["macro_f1"] = macro_f1();
  j["mcc"] = mcc();
  if (k_ == 2) {
    j["precision"] = precision(1);
    j["recall"] = recall(1);
    j["f1"] = f1(1);
  }
  nlohmann::json conf = nlohmann::json::array();
  for (int64_t i = 0; i < k_; ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t jj = 0; jj < k_; ++jj) row.push_back(confusion_[i * k_ + jj]);
    conf.push_back(row);
  }
  j["confusion"] = conf;
  return j;
}

}  // namespace ftune
