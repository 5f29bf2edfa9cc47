// Grid search over categorical, int and stepped float parameters (Optuna's GridSampler). Grid
// points are the product of each parameter's values over parameters sorted by name (the last
// varies fastest, like Optuna's itertools.product); with conditional parameters, points that
// differ only in inactive parameters are one point. Each trial takes the first point that no
// finished or running trial holds; after the last, points repeat in order.
#pragma once

#include <optional>

#include "hpo/sampler.h"

namespace ftune::hpo {

class GridSampler : public Sampler {
 public:
  void observe(const Trial& finished) override;
  Params sample(const SearchSpace& space, int64_t number,
                const std::vector<Trial>& running) override;
  std::optional<int64_t> max_trials(const SearchSpace& space) const override {
    return static_cast<int64_t>(grid(space).size());
  }
  // All grid points of `space`, in order (InputError for a float without a step or a grid over
  // 10 million points).
  static std::vector<Params> grid(const SearchSpace& space, const std::string& where = "sampler");

 private:
  std::vector<Params> visited_;
};

}  // namespace ftune::hpo
