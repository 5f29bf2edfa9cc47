// Scrambled Sobol and Halton points, mapped onto the space with from_unit (sampler_draw.cc).
#include "hpo/qmc_sampler.h"

#include <boost/random/sobol.hpp>

#include "core/error.h"

namespace ftune::hpo {
namespace {

constexpr uint64_t kScrambleStream = 0x51u;

std::vector<uint64_t> primes(size_t n) {
  std::vector<uint64_t> out;
  for (uint64_t c = 2; out.size() < n; ++c) {
    bool prime = true;
    for (uint64_t p : out) {
      if (p * p > c) break;
      if (c % p == 0) prime = false;
    }
    if (prime) out.push_back(c);
  }
  return out;
}

}  // namespace

std::vector<double> QmcSampler::point(size_t dim, uint64_t index) const {
  std::vector<double> u(dim);
  std::mt19937_64 rng = trial_rng(seed_, -1, kScrambleStream);
  if (kind_ == Kind::Sobol) {
    if (dim > boost::random::detail::qrng_tables::sobol::max_dimension)
      throw InputError(fmt::format(
          "qmc sampler: Sobol supports at most {} parameters",
          static_cast<unsigned>(boost::random::detail::qrng_tables::sobol::max_dimension)));
    boost::random::sobol eng(dim);
    eng.seed(index);
    for (size_t j = 0; j < dim; ++j) {
      uint64_t x = eng();
      if (scramble_) x ^= rng();  // digital shift: XOR of all binary digits with a random word
      u[j] = static_cast<double>(x >> 11) * 0x1.0p-53;
    }
    return u;
  }
  const std::vector<uint64_t> bases = primes(dim);
  for (size_t j = 0; j < dim; ++j) {
    const uint64_t b = bases[j];
    std::vector<uint64_t> perm(b);  // digit permutation fixing 0, so the expansion stays finite
    for (uint64_t k = 0; k < b; ++k) perm[k] = k;
    if (scramble_) std::shuffle(perm.begin() + 1, perm.end(), rng);
    double f = 1.0, x = 0.0;
    // Index + 1: the unscrambled point 0 would be the corner (0, ..., 0).
    for (uint64_t i = index + 1; i > 0; i /= b) {
      f /= static_cast<double>(b);
      x += f * static_cast<double>(perm[i % b]);
    }
    u[j] = std::min(x, std::nextafter(1.0, 0.0));
  }
  return u;
}

Params QmcSampler::sample(const SearchSpace& space, int64_t number, const std::vector<Trial>&) {
  const auto& ps = space.params();
  const std::vector<double> u = point(ps.size(), static_cast<uint64_t>(number));
  Params out;
  for (size_t j = 0; j < ps.size(); ++j)
    if (space.active(ps[j], out)) out[ps[j].name] = from_unit(ps[j].dist, u[j]);
  return out;
}

}  // namespace ftune::hpo
