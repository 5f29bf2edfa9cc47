// Quasi-random sampling (Optuna's QMCSampler): trial `number` takes point `number` of a
// scrambled low-discrepancy sequence over all parameters of the space (one dimension each,
// inactive ones skipped). Sobol (Joe-Kuo direction numbers from Boost.Random) is scrambled with a
// random digital shift; Halton with random digit permutations per base. Both keep the sequence's
// low discrepancy and make each study seed a different, reproducible sequence.
#pragma once

#include "hpo/sampler.h"

namespace ftune::hpo {

class QmcSampler : public Sampler {
 public:
  enum class Kind { Sobol, Halton };
  QmcSampler(Kind kind, bool scramble, uint64_t seed)
      : kind_(kind), scramble_(scramble), seed_(seed) {}
  void observe(const Trial&) override {}
  Params sample(const SearchSpace& space, int64_t number,
                const std::vector<Trial>& running) override;
  // Point `index` of the sequence in [0, 1)^dim.
  std::vector<double> point(size_t dim, uint64_t index) const;

 private:
  Kind kind_;
  bool scramble_;
  uint64_t seed_;
};

}  // namespace ftune::hpo
