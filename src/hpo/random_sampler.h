// Independent uniform sampling of every active parameter (Optuna's RandomSampler).
#pragma once

#include "hpo/sampler.h"

namespace ftune::hpo {

class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(uint64_t seed) : seed_(seed) {}
  void observe(const Trial&) override {}
  Params sample(const SearchSpace& space, int64_t number,
                const std::vector<Trial>& running) override;

 private:
  uint64_t seed_;
};

}  // namespace ftune::hpo
