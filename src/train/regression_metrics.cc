// Regression metrics: MSE, MAE, Pearson and Spearman over kept (prediction, target) pairs (see
// regression_metrics.h).
#include "train/regression_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace ftune {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

void RegressionMetrics::add(float prediction, float target) {
  predictions_.push_back(prediction);
  targets_.push_back(target);
}

void RegressionMetrics::add_batch(const float* predictions, const float* targets, int64_t rows) {
  for (int64_t i = 0; i < rows; ++i) add(predictions[i], targets[i]);
}

void RegressionMetrics::add_loss(double loss_sum, int64_t rows) {
  loss_sum_ += loss_sum;
  loss_rows_ += rows;
}

void RegressionMetrics::merge(const RegressionMetrics& o) {
  predictions_.insert(predictions_.end(), o.predictions_.begin(), o.predictions_.end());
  targets_.insert(targets_.end(), o.targets_.begin(), o.targets_.end());
  loss_sum_ += o.loss_sum_;
  loss_rows_ += o.loss_rows_;
}

double RegressionMetrics::mse() const {
  if (predictions_.empty()) return kNan;
  double sum = 0;
  for (size_t i = 0; i < predictions_.size(); ++i) {
    const double r = double(predictions_[i]) - double(targets_[i]);
    sum += r * r;
  }
  return sum / double(predictions_.size());
}

double RegressionMetrics::mae() const {
  if (predictions_.empty()) return kNan;
  double sum = 0;
  for (size_t i = 0; i < predictions_.size(); ++i)
    sum += std::fabs(double(predictions_[i]) - double(targets_[i]));
  return sum / double(predictions_.size());
}

double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  FTUNE_ASSERT(x.size() == y.size(), "pearson of {} and {} values", x.size(), y.size());
  const size_t n = x.size();
  if (n < 2) return kNan;
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / double(n),
               my = std::accumulate(y.begin(), y.end(), 0.0) / double(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return kNan;
  // Rounding can push |r| a hair past 1 for (anti)collinear series; scipy clips too.
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

std::vector<double> average_ranks(const std::vector<float>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double rank = (double(i) + double(j)) / 2.0 + 1.0;  // ranks i+1 .. j+1, averaged
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = rank;
    i = j + 1;
  }
  return ranks;
}

double RegressionMetrics::pearson() const {
  return pearson_correlation(std::vector<double>(predictions_.begin(), predictions_.end()),
                             std::vector<double>(targets_.begin(), targets_.end()));
}

double RegressionMetrics::spearman() const {
  return pearson_correlation(average_ranks(predictions_), average_ranks(targets_));
}

double RegressionMetrics::mean_loss() const {
  return loss_rows_ > 0 ? loss_sum_ / double(loss_rows_) : kNan;
}

nlohmann::json RegressionMetrics::to_json() const {
  const double m = mse();
  return {{"rows", count()},
          {"loss", number_or_null(mean_loss())},
          {"mse", number_or_null(m)},
          {"rmse", number_or_null(std::sqrt(m))},
          {"mae", number_or_null(mae())},
          {"pearson", number_or_null(pearson())},
          {"spearman", number_or_null(spearman())}};
}

}  // namespace ftune
