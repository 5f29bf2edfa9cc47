// Samplers propose the parameters of the next trial: random, quasi-random (Sobol/Halton), grid
// and TPE (tpe_sampler.h). A sampler is fed each finished trial once (observe) and asked for the
// parameters of trial `number`; randomness is keyed by (seed, number), so the same study seed
// gives the same proposals whichever worker asks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "hpo/search_space.h"
#include "hpo/trial.h"

namespace ftune::hpo {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual void observe(const Trial& finished) = 0;  // each finished trial once, any order
  // Parameters for trial `number` (only active params set); `running`: trials in flight.
  virtual Params sample(const SearchSpace& space, int64_t number,
                        const std::vector<Trial>& running) = 0;
  // The number of distinct points the sampler can propose in `space` (grid: its size), after
  // which a study should stop; nullopt when unbounded.
  virtual std::optional<int64_t> max_trials(const SearchSpace& space) const { return std::nullopt; }
};

// cfg: the `sampler:` YAML mapping (may be undefined -> TPE defaults);
// {type: random|qmc|grid|tpe, ...}. Options per type:
//   qmc:  qmc_type: sobol|halton (sobol), scramble: bool (true)
//   grid: (none) — every param must be categorical, int or a float with a step
//   tpe:  n_startup_trials (10), n_ei_candidates (24), n_ei_candidates_per_dim (16; 0: off),
//         multivariate (true, as Optuna 5), group (false), constant_liar (true),
//         prior_weight (1.0), consider_magic_clip (true), consider_endpoints (false),
//         consider_prior (true), max_above_kernels (128; 0: exact), below_bandwidth_factor (0.5)
// Errors (InputError) name `where` and the key.
std::unique_ptr<Sampler> make_sampler(const YAML::Node& cfg, const std::string& where,
                                      Direction direction, uint64_t seed);

// A 64-bit generator for trial `number` of a study seeded with `seed` (SplitMix64 mixing).
std::mt19937_64 trial_rng(uint64_t seed, int64_t number, uint64_t stream = 0);

// Draws one value of `d` uniformly the way Optuna's RandomSampler does: floats uniform on their
// (log) range, stepped floats and ints uniform over their grid, categoricals uniform.
double sample_uniform(const Distribution& d, std::mt19937_64& rng);
// Maps u in [0, 1) to a value of `d` (same scale as sample_uniform; used by QMC).
double from_unit(const Distribution& d, double u);

}  // namespace ftune::hpo
