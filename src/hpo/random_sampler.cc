// Random sampler: parameters in space order, each drawn uniformly when its condition holds.
#include "hpo/random_sampler.h"

namespace ftune::hpo {

Params RandomSampler::sample(const SearchSpace& space, int64_t number, const std::vector<Trial>&) {
  std::mt19937_64 rng = trial_rng(seed_, number);
  Params out;
  for (const auto& p : space.params())
    if (space.active(p, out)) out[p.name] = sample_uniform(p.dist, rng);
  return out;
}

}  // namespace ftune::hpo
