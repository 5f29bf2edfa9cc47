// Early stopping on an evaluation metric: the best value so far (improvement means better by more
// than min_delta, in the metric's direction), and the number of evaluations since. Its state goes
// into every checkpoint so a resumed run stops exactly where the uninterrupted one would.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ftune {

class EarlyStopping {
 public:
  EarlyStopping(std::string metric, bool maximize, int64_t patience, double min_delta)
      : metric_(std::move(metric)),
        maximize_(maximize),
        patience_(patience),
        min_delta_(min_delta) {}

  // Records the metric of the evaluation at `step` and its loss; returns true when it is the new
  // best. A metric equal to the best (a saturated accuracy or ROC-AUC) with a lower loss counts as
  // better, so the selected model is not stuck at the first evaluation that reached the ceiling.
  bool update(double value, double loss, int64_t step);
  bool should_stop() const { return patience_ > 0 && bad_evals_ >= patience_; }

  const std::string& metric() const { return metric_; }
  bool maximize() const { return maximize_; }
  std::optional<double> best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  int64_t evals_without_improvement() const { return bad_evals_; }

  nlohmann::json state() const;
  // Restores what state() wrote; a malformed state raises InputError naming `where`.
  void restore(const nlohmann::json& state, const std::string& where);

 private:
  std::string metric_;
  bool maximize_;
  int64_t patience_;
  double min_delta_;
  std::optional<double> best_;
  double best_loss_ = 0;
  int64_t best_step_ = -1;
  int64_t bad_evals_ = 0;
};

}  // namespace ftune
