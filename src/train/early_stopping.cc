// Early stopping state machine (see early_stopping.h).
#include "train/early_stopping.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "io/json_file.h"

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

void EarlyStopping::restore(const nlohmann::json& s, const std::string& where) {
  const std::optional<double> best = io::get_optional_float(s, "best", where);
  // state() writes a NaN loss as null (JSON has no NaN).
  const double best_loss = io::get_optional_float(s, "best_loss", where).value_or(std::nan(""));
  const int64_t best_step = io::get_int(s, "best_step", where);
  const int64_t bad_evals = io::get_int(s, "evals_without_improvement", where);
  if (bad_evals < 0 || best_step < -1)
    throw InputError(
        fmt::format("{}: best_step ({}) must be >= -1 and evals_without_improvement ({}) >= 0",
                    where, best_step, bad_evals));
  best_ = best;
  best_loss_ = best_loss;
  best_step_ = best_step;
  bad_evals_ = bad_evals;
}

}  // namespace ftune
