// Multi-label metrics over kept (row, label) scores (see multilabel_metrics.h).
#include "train/multilabel_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace ftune {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

double f1_of(int64_t tp, int64_t fp, int64_t fn) {
  return tp == 0 ? 0.0 : 2.0 * double(tp) / double(2 * tp + fp + fn);
}

double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

}  // namespace

MultiLabelMetrics::MultiLabelMetrics(std::vector<std::string> labels) : labels_(std::move(labels)) {
  FTUNE_ASSERT(!labels_.empty(), "multi-label metrics without labels");
}

void MultiLabelMetrics::add(const float* logits, const float* targets) {
  for (int64_t c = 0; c < num_labels(); ++c) {
    scores_.push_back(logits[c]);
    truth_.push_back(targets[c] >= 0.5f ? 1 : 0);
  }
  ++rows_;
}

void MultiLabelMetrics::add_loss(double loss_sum, int64_t rows) {
  loss_sum_ += loss_sum;
  loss_rows_ += rows;
}

double MultiLabelMetrics::mean_loss() const {
  return loss_rows_ > 0 ? loss_sum_ / double(loss_rows_) : kNaN;
}

double MultiLabelMetrics::roc_auc(int64_t label) const {
  const int64_t K = num_labels();
  std::vector<std::pair<float, uint8_t>> s;
  for (int64_t r = 0; r < rows_; ++r) s.emplace_back(scores_[r * K + label], truth_[r * K + label]);
  std::sort(s.begin(), s.end());
  double pos = 0, neg = 0, wins = 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    double p = 0, n = 0;
    for (; j < s.size() && s[j].first == s[i].first; ++j) (s[j].second ? p : n) += 1;
    wins += p * neg + 0.5 * p * n;  // positives above every earlier negative, ties half
    pos += p;
    neg += n;
    i = j;
  }
  return pos == 0 || neg == 0 ? kNaN : wins / (pos * neg);
}

std::vector<double> MultiLabelMetrics::best_thresholds() const {
  const int64_t K = num_labels();
  std::vector<double> out(K, 0.0);
  for (int64_t c = 0; c < K; ++c) {
    std::vector<std::pair<float, uint8_t>> s;
    int64_t positives = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      s.emplace_back(scores_[r * K + c], truth_[r * K + c]);
      positives += truth_[r * K + c];
    }
    if (s.empty() || positives == 0) continue;  // nothing to choose from: probability 0.5
    std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    // Predict the top i rows (those above the threshold): sweep i over the distinct scores.
    double best = f1_of(0, 0, positives);
    double best_threshold = double(s.front().first) + 1.0;  // above every row
    int64_t tp = 0, fp = 0;
    for (size_t i = 0; i < s.size();) {
      size_t j = i;
      for (; j < s.size() && s[j].first == s[i].first; ++j) (s[j].second ? tp : fp) += 1;
      const double f = f1_of(tp, fp, positives - tp);
      if (f > best) {
        best = f;
        best_threshold = j < s.size() ? (double(s[i].first) + double(s[j].first)) / 2.0
                                      : double(s[i].first) - 1.0;
      }
      i = j;
    }
    out[c] = best_threshold;
  }
  return out;
}

nlohmann::json MultiLabelMetrics::to_json(const std::vector<double>& thresholds) const {
  const int64_t K = num_labels();
  FTUNE_ASSERT(static_cast<int64_t>(thresholds.size()) == K, "{} thresholds for {} labels",
               thresholds.size(), K);
  int64_t TP = 0, FP = 0, FN = 0, exact = 0;
  double macro = 0, auc_sum = 0;
  int64_t auc_labels = 0;
  nlohmann::json per = nlohmann::json::array();
  std::vector<int64_t> tp(K, 0), fp(K, 0), fn(K, 0), support(K, 0);
  for (int64_t r = 0; r < rows_; ++r) {
    bool all = true;
    for (int64_t c = 0; c < K; ++c) {
      const bool pred = double(scores_[r * K + c]) > thresholds[c], truth = truth_[r * K + c];
      tp[c] += pred && truth;
      fp[c] += pred && !truth;
      fn[c] += !pred && truth;
      support[c] += truth;
      all = all && pred == truth;
    }
    exact += all;
  }
  for (int64_t c = 0; c < K; ++c) {
    TP += tp[c];
    FP += fp[c];
    FN += fn[c];
    const double f = f1_of(tp[c], fp[c], fn[c]);
    macro += f;
    const double auc = roc_auc(c);
    if (std::isfinite(auc)) {
      auc_sum += auc;
      ++auc_labels;
    }
    per.push_back(
        {{"label", labels_[c]},
         {"support", support[c]},
         {"precision", num(tp[c] + fp[c] > 0 ? double(tp[c]) / double(tp[c] + fp[c]) : 0.0)},
         {"recall", num(support[c] > 0 ? double(tp[c]) / double(support[c]) : kNaN)},
         {"f1", f},
         {"roc_auc", num(auc)},
         {"threshold", sigmoid(thresholds[c])},
         {"margin", thresholds[c]}});
  }
  return {{"rows", rows_},
          {"loss", num(mean_loss())},
          {"micro_f1", f1_of(TP, FP, FN)},
          {"macro_f1", macro / double(K)},
          {"subset_accuracy", rows_ > 0 ? double(exact) / double(rows_) : kNaN},
          {"macro_roc_auc", num(auc_labels > 0 ? auc_sum / double(auc_labels) : kNaN)},
          {"per_label", per}};
}

nlohmann::json MultiLabelMetrics::to_json_with(const std::vector<double>& chosen) const {
  nlohmann::json j = to_json(std::vector<double>(static_cast<size_t>(num_labels()), 0.0));
  nlohmann::json at = to_json(chosen);
  at.erase("rows");
  at.erase("loss");
  nlohmann::json probs = nlohmann::json::array(), margins = nlohmann::json::array();
  for (double m : chosen) {
    probs.push_back(sigmoid(m));
    margins.push_back(m);
  }
  at["thresholds"] = probs;
  at["margins"] = margins;
  j["at_threshold"] = at;
  return j;
}

}  // namespace ftune
