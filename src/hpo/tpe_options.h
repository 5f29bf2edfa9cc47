// Options of the TPE sampler, with Optuna's (5.x) defaults; Optuna 5 makes TPE multivariate by
// default for a single objective, and so does ftune. Three defaults are ftune's own (chosen on
// seeds 100-159 of bench/hpo_regret, see bench/results/hpo_regret.md): 16 EI candidates per
// dimension of a joint block (at least 24), l(x)'s bandwidths halved, and g(x) summarized past
// 128 above trials.
#pragma once

#include <cstdint>

namespace ftune::hpo {

struct TpeOptions {
  int64_t n_startup_trials = 10;  // random sampling until this many trials finished
  int64_t n_ei_candidates = 24;   // candidates drawn from l(x); the best l(x)/g(x) wins
  // > 0: a block of d parameters draws max(n_ei_candidates, round(this * d)) candidates (more
  // candidates find l(x)/g(x)'s maxima in higher dimensions; Optuna's fixed 24: 0).
  double n_ei_candidates_per_dim = 16;
  bool multivariate = true;       // one joint estimator over the parameters all trials share
  bool group = false;             // multivariate per group of parameters that occur together
  bool constant_liar = true;      // running trials count as (worst-valued) observations
  double prior_weight = 1.0;
  bool consider_prior = true;
  bool consider_magic_clip = true;
  bool consider_endpoints = false;
  // l(x)'s kernel widths (Optuna's rule, after the clip) times this: < 1 searches closer to the
  // best trials. Optuna: 1.
  double below_bandwidth_factor = 0.5;
  // g(x) is Optuna's exact mixture while a block has at most this many "above" trials; beyond,
  // an incrementally kept summary of them (above_index.h) in at most this many kernels, so a
  // suggestion costs the same at 10,000 trials as at 1,000. 0: always exact (O(trials)).
  int64_t max_above_kernels = 128;
};

}  // namespace ftune::hpo
