// above_mixture (see above_mixture.h): the AboveIndex summary turned into TPE's g(x) kernels,
// with the running trials and the prior.
#include "hpo/above_mixture.h"

#include <algorithm>
#include <cmath>

namespace ftune::hpo {

ParzenKernels above_mixture(const std::vector<Distribution>& dists, const AboveIndex& index,
                            const std::vector<std::vector<double>>& lies, const TpeOptions& o,
                            const std::vector<std::vector<double>>& at) {
  const size_t dim = dists.size();
  const double n = static_cast<double>(index.size() + lies.size());
  // Kernel width: Optuna's magic-clip floor (range / min(100, n + 2)), which nearly every
  // kernel of the exact mixture sits at once trials are this many; merged nodes widen it by
  // their members' spread (moment matching: sigma^2 = spread^2 + width^2).
  std::vector<double> width(dim, 1.0);
  for (size_t d = 0; d < dim; ++d)
    if (dists[d].kind != Distribution::Kind::Categorical)
      width[d] = (index.hi(d) - index.lo(d)) / std::min(100.0, n + 2);
  // Optuna's weights ramp from 1/n for the oldest above trial to 1; here linearly in the trial
  // number (a sum over a node is then a * count + b * sum of numbers).
  const auto lo = static_cast<double>(index.min_number()),
             hi = static_cast<double>(index.max_number());
  const double b = hi > lo ? (1.0 - 1.0 / n) / (hi - lo) : 0.0;
  const double a = hi > lo ? 1.0 / n - b * lo : 1.0;
  const AboveIndex::Summary sum = index.summarize(static_cast<size_t>(o.max_above_kernels), a,
                                                 b, width, at, o.consider_endpoints);

  ParzenKernels k;
  k.weights = sum.weight;
  k.mu.resize(dim);
  k.sigma.resize(dim);
  k.probs.resize(dim);
  const double fill = o.prior_weight / (n + 1);  // Optuna's smoothing of categorical rows
  for (size_t d = 0; d < dim; ++d) {
    const Distribution& dist = dists[d];
    if (dist.kind == Distribution::Kind::Categorical) {
      const auto nc = static_cast<double>(dist.choices.size());
      for (double f : sum.freq[d]) k.probs[d].push_back((fill + f) / (fill * nc + 1.0));
      continue;
    }
    const double range = index.hi(d) - index.lo(d);
    k.mu[d] = sum.mean[d];
    // A single trial: Optuna's rule (the farther neighbour's distance, clipped); a merged node:
    // its members' spread widened by the clip width (moment matching).
    for (size_t j = 0; j < sum.weight.size(); ++j)
      k.sigma[d].push_back(sum.count[j] == 1
                               ? std::clamp(sum.gap[d][j], width[d], range)
                               : std::min(std::sqrt(sum.var[d][j] + width[d] * width[d]), range));
  }
  for (const auto& x : lies) {  // running trials: newest, full weight, one kernel each
    k.weights.push_back(1.0);
    for (size_t d = 0; d < dim; ++d) {
      const Distribution& dist = dists[d];
      if (dist.kind == Distribution::Kind::Categorical) {
        const auto nc = dist.choices.size();
        for (size_t c = 0; c < nc; ++c)
          k.probs[d].push_back((fill + (c == static_cast<size_t>(x[d]) ? 1.0 : 0.0)) /
                               (fill * static_cast<double>(nc) + 1.0));
        continue;
      }
      k.mu[d].push_back(dist.log ? std::log(x[d]) : x[d]);
      k.sigma[d].push_back(width[d]);
    }
  }
  if (o.consider_prior) {
    k.weights.push_back(o.prior_weight);
    for (size_t d = 0; d < dim; ++d) {
      const Distribution& dist = dists[d];
      if (dist.kind == Distribution::Kind::Categorical) {
        const auto nc = dist.choices.size();
        k.probs[d].insert(k.probs[d].end(), nc, 1.0 / static_cast<double>(nc));
        continue;
      }
      k.mu[d].push_back(0.5 * (index.lo(d) + index.hi(d)));
      k.sigma[d].push_back(index.hi(d) - index.lo(d));
    }
  }
  return k;
}

}  // namespace ftune::hpo
