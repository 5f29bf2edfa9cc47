// Regression metrics of a single-score model (training.loss mse or distill_mse: STS-B-style float
// targets, or a teacher's scores): mean squared error, mean absolute error, Pearson's r and
// Spearman's rho, and the mean loss. Spearman needs every score's rank, so the object keeps each
// row's (prediction, target) pair: 8 bytes a row (80 MB for 10 million validation rows); MSE,
// MAE and Pearson are computed from the same pairs in double.
//   pearson  = cov(x, y) / (sd(x) sd(y))  (NaN when either is constant, as scipy.stats.pearsonr)
//   spearman = pearson of the ranks, ties given their average rank (scipy.stats.spearmanr)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace ftune {

class RegressionMetrics {
 public:
  void add(float prediction, float target);
  // `rows` predictions and their targets.
  void add_batch(const float* predictions, const float* targets, int64_t rows);
  void add_loss(double loss_sum, int64_t rows);
  // Appends another object's rows (in order) and loss: streaming in chunks equals one pass.
  void merge(const RegressionMetrics& other);

  int64_t count() const { return static_cast<int64_t>(predictions_.size()); }
  const std::vector<float>& predictions() const { return predictions_; }
  const std::vector<float>& targets() const { return targets_; }
  double loss_sum() const { return loss_sum_; }
  int64_t loss_rows() const { return loss_rows_; }

  double mse() const;
  double mae() const;
  double pearson() const;
  double spearman() const;
  double mean_loss() const;

  // {"rows", "loss", "mse", "rmse", "mae", "pearson", "spearman"}; NaN values become null.
  nlohmann::json to_json() const;

 private:
  std::vector<float> predictions_, targets_;
  double loss_sum_ = 0;
  int64_t loss_rows_ = 0;
};

// Pearson's r of two equally long series (NaN for fewer than 2 values or a constant series).
double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y);
// The 1-based ranks of `v`, tied values sharing their average rank (scipy.stats.rankdata).
std::vector<double> average_ranks(const std::vector<float>& v);

}  // namespace ftune
