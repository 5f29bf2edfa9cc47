// TPE's g(x) for many "above" trials: the AboveIndex summary (at most o.max_above_kernels
// kernels, refined near the points `at`: TPE passes the below trials, which its candidates are
// drawn around), one kernel per running trial
// (constant liar, full weight, the clip width) and the prior kernel, with Optuna's rules where a
// kernel stands for one trial: bandwidth from the farther neighbour clipped to
// [range / min(100, n + 2), range], categorical rows smoothed by prior_weight / (n + 1), weights
// ramping from 1/n for the oldest trial to 1 (here linearly in the trial number). A node of
// several trials becomes one kernel by moment matching: their mean, and sigma^2 = their variance
// + the clip width^2. With no more above trials than kernels, the mixture is Optuna's to within
// the weight ramp (see the test AboveMixture.MatchesTheExactMixtureWhenNothingIsMerged).
#pragma once

#include <vector>

#include "hpo/above_index.h"
#include "hpo/parzen_estimator.h"
#include "hpo/tpe_options.h"

namespace ftune::hpo {

// lies: the running trials' values (as in Params, in dists' order). index.size() > 0.
ParzenKernels above_mixture(const std::vector<Distribution>& dists, const AboveIndex& index,
                            const std::vector<std::vector<double>>& lies, const TpeOptions& o,
                            const std::vector<std::vector<double>>& at);

}  // namespace ftune::hpo
