// Parzen estimator construction, sampling and log-density (a port of
// optuna/samplers/_tpe/parzen_estimator.py and probability_distributions.py).
#include "hpo/parzen_estimator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "hpo/truncnorm.h"

namespace ftune::hpo {
namespace {

constexpr double kEps = 1e-12;
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<double> default_weights(size_t n) {
  if (n < 25) return std::vector<double>(n, 1.0);
  std::vector<double> w(n, 1.0);
  const size_t num = n - 25;  // np.linspace(1 / n, 1, num=n - 25)
  const double start = 1.0 / static_cast<double>(n);
  if (num == 1) w[0] = start;
  if (num > 1) {
    const double step = (1.0 - start) / static_cast<double>(num - 1);
    for (size_t i = 0; i < num; ++i) w[i] = static_cast<double>(i) * step + start;
    w[num - 1] = 1.0;
  }
  return w;
}

ParzenEstimator::ParzenEstimator(const std::vector<Distribution>& dists,
                                 const std::vector<std::vector<double>>& observations,
                                 const ParzenOptions& o,
                                 const std::vector<std::vector<uint32_t>>* order) {
  FTUNE_ASSERT(dists.size() == observations.size(), "{} distributions, {} observation columns",
               dists.size(), observations.size());
  const size_t n = observations.empty() ? 0 : observations[0].size();
  const bool prior = o.consider_prior || n == 0;
  weights_ = default_weights(n);
  if (prior) weights_.push_back(n == 0 ? 1.0 : o.prior_weight);
  const double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  for (double& w : weights_) w /= total;
  log_weights_.resize(weights_.size());
  for (size_t k = 0; k < weights_.size(); ++k) log_weights_[k] = std::log(weights_[k]);
  const size_t n_kernels = weights_.size();

  for (size_t di = 0; di < dists.size(); ++di) {
    const Distribution& dist = dists[di];
    const std::vector<double>& obs = observations[di];
    FTUNE_ASSERT(obs.size() == n, "ragged observations");
    Dim d;
    d.dist = dist;
    if (dist.kind == Distribution::Kind::Categorical) {
      d.numeric = false;
      const auto n_choices = static_cast<double>(dist.choices.size());
      d.log_uniform = -std::log(n_choices);
      const double fill = o.prior_weight / static_cast<double>(n + 1);
      const double row_sum = fill * n_choices + 1.0;
      d.log_hit = std::log((fill + 1.0) / row_sum);
      d.log_miss = std::log(fill / row_sum);
      d.observed.resize(n_kernels, -1);
      for (size_t k = 0; k < n; ++k) d.observed[k] = static_cast<int64_t>(obs[k]);
      dims_.push_back(std::move(d));
      continue;
    }
    d = numeric_dim(dist);
    const double low = d.lo, high = d.hi;
    d.mu.resize(n_kernels);
    d.sigma.resize(n_kernels);
    for (size_t k = 0; k < n; ++k) d.mu[k] = d.log ? std::log(obs[k]) : obs[k];
    if (n > 0) {
      std::vector<uint32_t> sorted;
      if (order) {
        sorted = (*order)[di];
        FTUNE_ASSERT(sorted.size() == n, "order has {} entries for {} observations", sorted.size(),
                     n);
      } else {
        sorted.resize(n);
        std::iota(sorted.begin(), sorted.end(), 0u);
        std::stable_sort(sorted.begin(), sorted.end(),
                         [&](uint32_t a, uint32_t b) { return d.mu[a] < d.mu[b]; });
      }
      // Sorted mus with the bounds as endpoints: s[0] = low, s[1..n] = mus, s[n+1] = high.
      auto s = [&](size_t i) { return i == 0 ? low : i == n + 1 ? high : d.mu[sorted[i - 1]]; };
      std::vector<double> sorted_sigma(n);
      for (size_t i = 1; i <= n; ++i)
        sorted_sigma[i - 1] = std::max(s(i) - s(i - 1), s(i + 1) - s(i));
      if (!o.consider_endpoints && n + 2 >= 4) {
        sorted_sigma[0] = s(2) - s(1);
        sorted_sigma[n - 1] = s(n) - s(n - 1);
      }
      const double maxsigma = high - low;
      const double minsigma = o.consider_magic_clip
                                  ? (high - low) / std::min(100.0, 1.0 + static_cast<double>(n + 1))
                                  : kEps;
      for (size_t i = 0; i < n; ++i)
        d.sigma[sorted[i]] = o.bandwidth_factor * std::clamp(sorted_sigma[i], minsigma, maxsigma);
    }
    if (prior) {
      d.mu[n] = 0.5 * (low + high);
      d.sigma[n] = high - low;
    }
    finish_numeric(d);
    dims_.push_back(std::move(d));
  }
}

ParzenEstimator::Dim ParzenEstimator::numeric_dim(const Distribution& dist) {
  Dim d;
  d.dist = dist;
  d.discrete = dist.kind == Distribution::Kind::Int || dist.step > 0;
  d.log = dist.log;
  std::tie(d.lo, d.hi) = parzen_bounds(dist);
  return d;
}

std::pair<double, double> parzen_bounds(const Distribution& dist) {
  double low = dist.low, high = dist.high;
  if (dist.kind == Distribution::Kind::Int || dist.step > 0) {
    low -= dist.step / 2;
    high += dist.step / 2;
  }
  if (dist.log) {
    low = std::log(low);
    high = std::log(high);
  }
  return {low, high};
}

void ParzenEstimator::finish_numeric(Dim& d) {
  const size_t n_kernels = d.mu.size();
  d.log_norm.resize(n_kernels);
  d.log_sigma.resize(n_kernels);
  d.inv_sigma.resize(n_kernels);
  for (size_t k = 0; k < n_kernels; ++k) {
    d.log_sigma[k] = std::log(d.sigma[k]);
    d.inv_sigma[k] = 1.0 / d.sigma[k];
    d.log_norm[k] =
        truncnorm::log_gauss_mass((d.lo - d.mu[k]) / d.sigma[k], (d.hi - d.mu[k]) / d.sigma[k]);
  }
}

ParzenEstimator::ParzenEstimator(const std::vector<Distribution>& dists, const ParzenKernels& k) {
  const size_t nk = k.weights.size();
  FTUNE_ASSERT(nk > 0, "a mixture needs a kernel");
  const double total = std::accumulate(k.weights.begin(), k.weights.end(), 0.0);
  FTUNE_ASSERT(total > 0, "mixture weights sum to {}", total);
  for (double w : k.weights) {
    weights_.push_back(w / total);
    log_weights_.push_back(std::log(w / total));
  }
  for (size_t di = 0; di < dists.size(); ++di) {
    const Distribution& dist = dists[di];
    if (dist.kind == Distribution::Kind::Categorical) {
      Dim d;
      d.dist = dist;
      d.numeric = false;
      FTUNE_ASSERT(k.probs.size() > di && k.probs[di].size() == nk * dist.choices.size(),
                   "categorical dimension {} needs {} probabilities", di,
                   nk * dist.choices.size());
      d.log_probs.resize(k.probs[di].size());
      for (size_t j = 0; j < d.log_probs.size(); ++j) d.log_probs[j] = std::log(k.probs[di][j]);
      dims_.push_back(std::move(d));
      continue;
    }
    Dim d = numeric_dim(dist);
    d.midpoint = true;  // a summary already; exact masses would cost most of its evaluation
    FTUNE_ASSERT(k.mu.size() > di && k.mu[di].size() == nk && k.sigma[di].size() == nk,
                 "numeric dimension {} needs {} kernels", di, nk);
    d.mu = k.mu[di];
    d.sigma = k.sigma[di];
    finish_numeric(d);
    dims_.push_back(std::move(d));
  }
}

double ParzenEstimator::log_choice(const Dim& d, size_t k, int64_t c) const {
  if (!d.log_probs.empty()) return d.log_probs[k * d.dist.choices.size() + static_cast<size_t>(c)];
  if (d.observed[k] < 0) return d.log_uniform;
  return c == d.observed[k] ? d.log_hit : d.log_miss;
}

double ParzenEstimator::log_mass(const Dim& d, size_t k, double left, double right,
                                 double log_width) const {
  const double mu = d.mu[k], sigma = d.sigma[k];
  if (d.midpoint) {
    // Mass of N(0, 1) on [z - r/2, z + r/2] = r phi(z) (1 + r^2 (z^2 - 1) / 24 + R), with
    // |R| <= r^4 (z^4 + 6 z^2 + 3) / 1920 < 7e-4 when r <= 0.2 and |z| r <= 1: the log is
    // then within 1e-3 of the exact mass, at one log1p instead of two erfc and three logs.
    const double r = (right - left) * d.inv_sigma[k];
    const double z = (0.5 * (left + right) - mu) * d.inv_sigma[k];
    if (r <= 0.2 && std::abs(z) * r <= 1.0) {
      static const double kLogC = std::log(std::sqrt(2 * M_PI));
      return log_width - d.log_sigma[k] - kLogC - z * z / 2 +
             std::log1p(r * r * (z * z - 1) / 24) - d.log_norm[k];
    }
    // Wide steps: Phi(b) - Phi(a) from two erfc on the side of the mode where both tails are
    // small (no cancellation beyond 1e-16 / mass), when the mass is not tiny; else exact.
    const double a = (left - mu) * d.inv_sigma[k], b = (right - mu) * d.inv_sigma[k];
    const double mass = b <= 0 ? 0.5 * (std::erfc(-b * M_SQRT1_2) - std::erfc(-a * M_SQRT1_2))
                               : 0.5 * (std::erfc(a * M_SQRT1_2) - std::erfc(b * M_SQRT1_2));
    if (mass > 1e-8) return std::log(mass) - d.log_norm[k];
  }
  return truncnorm::log_gauss_mass((left - mu) / sigma, (right - mu) / sigma) - d.log_norm[k];
}

double ParzenEstimator::log_kernel(const Dim& d, size_t k, double x) const {
  if (!d.numeric) return log_choice(d, k, static_cast<int64_t>(x));
  const double mu = d.mu[k], sigma = d.sigma[k];
  if (d.discrete) {
    const double step = d.dist.step;
    const double left = d.log ? std::log(x - step / 2) : x - step / 2;
    const double right = d.log ? std::log(x + step / 2) : x + step / 2;
    return log_mass(d, k, left, right, std::log(right - left));
  }
  const double xt = d.log ? std::log(x) : x;
  const double z = (xt - mu) / sigma;
  const double a = (d.lo - mu) / sigma, b = (d.hi - mu) / sigma;
  if (z < a || z > b) return -kInf;
  static const double kLogC = std::log(std::sqrt(2 * M_PI));
  return -(z * z) / 2.0 - kLogC - d.log_norm[k] - std::log(sigma);
}

// Sums over kernels in log space. Numeric discrete dimensions need a normal mass (erf, logs) per
// kernel: they first enter as a cheap upper bound (interval width times the largest density on
// it); only kernels whose bound comes within 50 nats of the best exact kernel get the exact
// mass, the others add less than e^-50 of the total each and are left out. Continuous and
// categorical dimensions are exact from the start.
double ParzenEstimator::log_pdf(const std::vector<double>& x) const {
  FTUNE_ASSERT(x.size() == dims_.size(), "point has {} values for {} dimensions", x.size(),
               dims_.size());
  static const double kLogC = std::log(std::sqrt(2 * M_PI));
  const size_t nk = weights_.size();
  std::vector<double> lp(log_weights_);
  std::vector<size_t> discrete;
  std::vector<std::array<double, 3>> interval;  // per discrete dimension: left, right, log width
  std::vector<std::vector<double>> bound;  // per discrete dimension: the bound added per kernel
  for (size_t di = 0; di < dims_.size(); ++di) {
    const Dim& d = dims_[di];
    if (!d.numeric) {
      const auto xi = static_cast<int64_t>(x[di]);
      for (size_t k = 0; k < nk; ++k) lp[k] += log_choice(d, k, xi);
      continue;
    }
    if (!d.discrete) {
      const double xt = d.log ? std::log(x[di]) : x[di];
      if (xt < d.lo || xt > d.hi) return -kInf;
      for (size_t k = 0; k < nk; ++k) {
        const double z = (xt - d.mu[k]) * d.inv_sigma[k];
        lp[k] += -(z * z) / 2.0 - kLogC - d.log_norm[k] - d.log_sigma[k];
      }
      continue;
    }
    const double step = d.dist.step;
    const double left = d.log ? std::log(x[di] - step / 2) : x[di] - step / 2;
    const double right = d.log ? std::log(x[di] + step / 2) : x[di] + step / 2;
    const double log_width = std::log(right - left);
    if (d.midpoint) {  // a summary: every kernel's mass, once per grid value asked for
      auto [it, fresh] = d.mass_cache.try_emplace(x[di]);
      if (fresh) {
        it->second.resize(nk);
        for (size_t k = 0; k < nk; ++k) it->second[k] = log_mass(d, k, left, right, log_width);
      }
      for (size_t k = 0; k < nk; ++k) lp[k] += it->second[k];
      continue;
    }
    discrete.push_back(di);
    interval.push_back({left, right, log_width});
    auto& b = bound.emplace_back(nk);
    for (size_t k = 0; k < nk; ++k) {
      const double mu = d.mu[k];
      const double dist = mu < left ? left - mu : mu > right ? mu - right : 0.0;
      const double z = dist * d.inv_sigma[k];
      b[k] = std::min(0.0, log_width - d.log_sigma[k] - kLogC - z * z / 2.0) - d.log_norm[k];
      lp[k] += b[k];
    }
  }
  if (!discrete.empty()) {
    auto exact = [&](size_t k) {
      double v = lp[k];
      for (size_t j = 0; j < discrete.size(); ++j)
        v += log_mass(dims_[discrete[j]], k, interval[j][0], interval[j][1], interval[j][2]) -
             bound[j][k];
      return v;
    };
    const size_t top = static_cast<size_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    const double floor = exact(top) - 50.0;
    for (size_t k = 0; k < nk; ++k) lp[k] = lp[k] < floor ? -kInf : exact(k);
  }
  double m = *std::max_element(lp.begin(), lp.end());
  if (std::isinf(m) && m < 0) m = 0;
  // Terms below e^-60 of the largest cannot move the sum of up to millions of kernels.
  const double cut = m - 60.0;
  double sum = 0;
  for (double v : lp)
    if (v >= cut) sum += std::exp(v - m);
  return std::log(sum) + m;
}

std::vector<std::vector<double>> ParzenEstimator::sample(std::mt19937_64& rng, int64_t n) const {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> cum(weights_.size());
  std::partial_sum(weights_.begin(), weights_.end(), cum.begin());
  std::vector<std::vector<double>> out(static_cast<size_t>(n), std::vector<double>(dims_.size()));
  for (auto& point : out) {
    const double u = uniform(rng) * cum.back();
    const size_t k = std::min<size_t>(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin(),
                                      weights_.size() - 1);
    for (size_t di = 0; di < dims_.size(); ++di) {
      const Dim& d = dims_[di];
      if (!d.numeric) {
        const size_t n_choices = d.dist.choices.size();
        const double q = uniform(rng);
        double c = 0;
        size_t idx = 0;
        for (; idx + 1 < n_choices; ++idx) {
          c += std::exp(log_choice(d, k, static_cast<int64_t>(idx)));
          if (!(c < q)) break;
        }
        point[di] = static_cast<double>(idx);
        continue;
      }
      const double mu = d.mu[k], sigma = d.sigma[k];
      double v =
          truncnorm::ppf(uniform(rng), (d.lo - mu) / sigma, (d.hi - mu) / sigma) * sigma + mu;
      if (d.log) v = std::exp(v);
      if (d.discrete) {
        v = d.dist.low + std::nearbyint((v - d.dist.low) / d.dist.step) * d.dist.step;
      }
      point[di] = std::clamp(v, d.dist.low, d.dist.high);
    }
  }
  return out;
}

}  // namespace ftune::hpo
