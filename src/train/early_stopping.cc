// Early stopping state machine (see early_stopping.h).
#include "train/early_stopping.h"

#include <cmath>

namespace ftune {

bool EarlyStopping::update(double value, double loss, int64_t step) {
  const bool better =
      std::isfinite(value) &&
      (!best_ || (maximize_ ? value > *best_ + min_delta_ : value < *best_ - min_delta_) ||
       (value == *best_ && std::isfinite(loss) && loss < best_loss_));
  if (better) {
    best_ = value;
    best_loss_ = loss;
    best_step_ = step;
    bad_evals_ = 0;
  } else {
    ++bad_evals_;
  }
  return better;
}

nlohmann::json EarlyStopping::state() const {
  nlohmann::json j = {
      {"metric", metric_}, {"best_step", best_step_}, {"evals_without_improvement", bad_evals_}};
  j["best"] = best_ ? nlohmann::json(*best_) : nlohmann::json(nullptr);
  j["best_loss"] = best_loss_;
  return j;
}

void EarlyStopping::restore(const nlohmann::json& s) {
  best_ = s.at("best").is_null() ? std::nullopt : std::optional<double>(s.at("best").get<double>());
  best_loss_ = s.at("best_loss").get<double>();
  best_step_ = s.at("best_step").get<int64_t>();
  bad_evals_ = s.at("evals_without_improvement").get<int64_t>();
}

}  // namespace ftune
