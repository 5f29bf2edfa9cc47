// Per-trial random generators and uniform draws over one distribution, shared by the samplers.
// The continuous scale follows Optuna's _SearchSpaceTransform: a float on [low, high] (log: on
// [log low, log high]); a stepped float or an int on [low - step/2, high + step/2] (log int: on
// [log(low - 1/2), log(high + 1/2)]) rounded back to its grid, so every grid value is equally
// likely.
#include <cmath>

#include "hpo/sampler.h"

namespace ftune::hpo {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::mt19937_64 trial_rng(uint64_t seed, int64_t number, uint64_t stream) {
  const uint64_t k =
      splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(number)) ^ stream);
  std::seed_seq seq{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32),
                    static_cast<uint32_t>(stream)};
  return std::mt19937_64(seq);
}

double from_unit(const Distribution& d, double u) {
  if (d.kind == Distribution::Kind::Categorical) {
    const double n = static_cast<double>(d.choices.size());
    return std::min(std::floor(u * n), n - 1);
  }
  if (d.low == d.high) return d.low;
  if (d.kind == Distribution::Kind::Float && d.step == 0) {
    if (d.log) {
      const double v = std::exp(std::log(d.low) + u * (std::log(d.high) - std::log(d.low)));
      return std::clamp(v, d.low, std::nextafter(d.high, d.low));
    }
    return std::min(d.low + u * (d.high - d.low), std::nextafter(d.high, d.low));
  }
  if (d.kind == Distribution::Kind::Int && d.log) {
    const double a = std::log(d.low - 0.5), b = std::log(d.high + 0.5);
    const double v = std::round(std::exp(a + u * (b - a)));
    return std::clamp(v, d.low, d.high);
  }
  const double a = d.low - 0.5 * d.step, b = d.high + 0.5 * d.step;
  const double t = a + u * (b - a);
  const double k = std::floor((t - d.low) / d.step + 0.5);
  return std::clamp(d.low + k * d.step, d.low, d.high);
}

double sample_uniform(const Distribution& d, std::mt19937_64& rng) {
  return from_unit(d, std::uniform_real_distribution<double>(0.0, 1.0)(rng));
}

}  // namespace ftune::hpo
