// The Parzen estimator of TPE: a weighted mixture of product kernels, one kernel per observation
// plus one prior kernel, exactly as Optuna's _ParzenEstimator builds it (bandwidths from the gaps
// to the sorted neighbours, magic clip, endpoints rule, prior weight, Optuna's default weights
// that ramp down old observations). Numeric dimensions are truncated normals on the (log) range,
// discretised for ints and stepped floats; categorical dimensions are smoothed indicator rows.
#pragma once

#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <unordered_map>
#include <vector>

#include "hpo/trial.h"

namespace ftune::hpo {

struct ParzenOptions {
  double prior_weight = 1.0;
  bool consider_prior = true;  // Optuna 4+/5 always adds the prior kernel; false drops it
  bool consider_magic_clip = true;
  bool consider_endpoints = false;
  double bandwidth_factor = 1.0;  // observation kernels' sigma (after the clip) times this
};

// A mixture given kernel by kernel (TPE's summarized g(x), tpe_sampler.cc): unnormalised
// weights; per numeric dimension d, mu[d][k] and sigma[d][k] on the internal scale (log where
// log; a discrete dimension's kernel is truncated to its range widened by step / 2); per
// categorical dimension, probs[d][k * n_choices + c] (each row sums to 1).
struct ParzenKernels {
  std::vector<double> weights;
  std::vector<std::vector<double>> mu, sigma;
  std::vector<std::vector<double>> probs;
};

// Optuna's default_weights(n): ones for n < 25, else a ramp from 1/n to 1 over the n - 25 oldest
// observations followed by 25 ones.
std::vector<double> default_weights(size_t n);

// The estimator's internal range of a numeric distribution: discrete ranges widen by step / 2 on
// each side, then log distributions take logs (Optuna's _ParzenEstimator bounds).
std::pair<double, double> parzen_bounds(const Distribution& dist);

class ParzenEstimator {
 public:
  // observations[d][k]: internal value of dimension d in observation k, observations in trial
  // number order (the weights depend on it). `order`, when given, holds for each numeric
  // dimension the observation indices sorted by value (ties by index); otherwise it is computed.
  ParzenEstimator(const std::vector<Distribution>& dists,
                  const std::vector<std::vector<double>>& observations, const ParzenOptions& o,
                  const std::vector<std::vector<uint32_t>>* order = nullptr);

  // The mixture exactly as given (dimensions without kernels in `k` must be of the other kind).
  ParzenEstimator(const std::vector<Distribution>& dists, const ParzenKernels& k);

  // `n` points drawn from the mixture (each a vector of internal values, one per dimension).
  std::vector<std::vector<double>> sample(std::mt19937_64& rng, int64_t n) const;
  // log density (log probability for discrete dimensions) of one point.
  double log_pdf(const std::vector<double>& x) const;
  size_t n_kernels() const { return weights_.size(); }

 private:
  struct Dim {
    Distribution dist;
    bool numeric = true, discrete = false, log = false;
    double lo = 0, hi = 0;  // adapted bounds (transformed; extended by step/2 when discrete)
    std::vector<double> mu, sigma, log_norm;  // per kernel; log_norm: log mass on [lo, hi]
    std::vector<double> log_sigma, inv_sigma;
    std::vector<int64_t> observed;  // categorical: observed index per kernel (-1 prior)
    std::vector<double> log_probs;  // categorical from ParzenKernels: log rows, kernel-major
    bool midpoint = false;  // discrete mass by the midpoint rule where it is this accurate
    // midpoint (summary) dimensions: log mass per kernel by grid value, filled as candidates
    // ask (they share values); mutable cache, so an estimator is used by one thread at a time.
    mutable std::unordered_map<double, std::vector<double>> mass_cache;
    double log_hit = 0, log_miss = 0, log_uniform = 0;
  };
  std::vector<double> weights_, log_weights_;
  std::vector<Dim> dims_;
  double log_kernel(const Dim& d, size_t k, double x) const;
  double log_choice(const Dim& d, size_t k, int64_t c) const;  // categorical kernel k at c
  // Discrete kernel k's log mass on [left, right] (internal scale), over its mass on [lo, hi].
  double log_mass(const Dim& d, size_t k, double left, double right, double log_width) const;
  // Numeric dimension setup shared by both constructors: bounds from the distribution.
  static Dim numeric_dim(const Distribution& dist);
  static void finish_numeric(Dim& d);  // log sigma, 1 / sigma, log mass on [lo, hi]
};

}  // namespace ftune::hpo
