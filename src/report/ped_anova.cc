// PED-ANOVA importances (ped_anova.h), ported from optuna/importance/_ped_anova (evaluator.py and
// scott_parzen_estimator.py, Optuna 5.0) step by step: the quantile filter, the grid counts, the
// Scott-bandwidth Parzen estimator over grid indices (a mixture of discretised truncated normals
// plus a prior kernel; categorical: smoothed one-hot kernels) and the Pearson divergence
// sum_x p_local(x) (p_top(x) / p_local(x) - 1)^2.
#include "report/ped_anova.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "hpo/truncnorm.h"

namespace ftune::report {
namespace {

using hpo::Distribution;
using hpo::Trial;

bool single(const Distribution& d) {
  if (d.kind == Distribution::Kind::Categorical) return d.choices.size() == 1;
  if (d.low == d.high) return true;
  const double step = d.kind == Distribution::Kind::Int ? (d.step > 0 ? d.step : 1) : d.step;
  if (step > 0 && !d.log) return (d.high - d.low) < step;
  return false;
}

// Trials per grid cell of `param` (optuna's _count_*_param_in_grid).
std::vector<double> grid_counts(const std::string& param, const Distribution& d,
                                const std::vector<const Trial*>& trials, int n_steps) {
  if (d.kind == Distribution::Kind::Categorical) {
    std::vector<double> counts(d.choices.size(), 0.0);
    for (const Trial* t : trials) counts[static_cast<size_t>(t->params.at(param))] += 1;
    return counts;
  }
  if (d.kind == Distribution::Kind::Int && d.log) {
    const int log2_size = static_cast<int>(std::ceil(std::log(d.high - d.low + 1) / std::log(2.0))) + 1;
    n_steps = std::min(log2_size, n_steps);
  } else {
    const double step = d.kind == Distribution::Kind::Int ? (d.step > 0 ? d.step : 1) : d.step;
    if (step > 0)
      n_steps = std::min(static_cast<int>(std::nearbyint((d.high - d.low) / step)) + 1, n_steps);
  }
  const double low = d.log ? std::log(d.low) : d.low, high = d.log ? std::log(d.high) : d.high;
  const double step_size = (high - low) / (n_steps - 1);
  std::vector<double> counts(static_cast<size_t>(n_steps), 0.0);
  for (const Trial* t : trials) {
    const double v = d.log ? std::log(t->params.at(param)) : t->params.at(param);
    long i = static_cast<long>(std::ceil((v - low) / step_size - 0.5));
    i = std::clamp(i, 0L, static_cast<long>(n_steps - 1));
    counts[static_cast<size_t>(i)] += 1;
  }
  return counts;
}

// The density of optuna's ScottParzenEstimator built on `counts` at each grid index.
std::vector<double> parzen_pdf(const std::vector<double>& counts, bool categorical,
                               double prior_weight) {
  const size_t n = counts.size();
  std::vector<double> obs, w;
  for (size_t i = 0; i < n; ++i)
    if (counts[i] != 0) obs.push_back(static_cast<double>(i)), w.push_back(counts[i]);
  std::vector<double> pdf(n, 0.0);
  if (obs.empty()) {  // only the prior: uniform
    std::fill(pdf.begin(), pdf.end(), 1.0 / static_cast<double>(n));
    return pdf;
  }
  std::vector<double> mix = w;
  mix.push_back(prior_weight);
  const double mix_sum = std::accumulate(mix.begin(), mix.end(), 0.0);
  for (double& m : mix) m /= mix_sum;
  if (categorical) {
    const double n_kernels = static_cast<double>(obs.size() + 1);
    for (size_t k = 0; k <= obs.size(); ++k) {
      // Kernel k: prior_weight / n_kernels everywhere, +1 at its observation; rows normalised.
      const double base = prior_weight / n_kernels;
      const double row_sum = base * static_cast<double>(n) + (k < obs.size() ? 1.0 : 0.0);
      for (size_t x = 0; x < n; ++x) {
        double v = base + (k < obs.size() && static_cast<size_t>(obs[k]) == x ? 1.0 : 0.0);
        pdf[x] += mix[k] * (row_sum == 0 ? v : v / row_sum);
      }
    }
    return pdf;
  }
  // Numerical: grid indices 0..n-1 as an integer domain [low, high] with step 1.
  const double low = 0, high = static_cast<double>(n - 1);
  std::vector<double> cum(w.size());
  std::partial_sum(w.begin(), w.end(), cum.begin());
  const double wsum = cum.back();
  double mean = 0;
  for (size_t i = 0; i < obs.size(); ++i) mean += obs[i] * w[i];
  mean /= wsum;
  double var = 0;
  for (size_t i = 0; i < obs.size(); ++i) var += (obs[i] - mean) * (obs[i] - mean) * w[i];
  double sigma = std::sqrt(var / std::max(1.0, wsum - 1));
  // numpy searchsorted: q1 the first cum >= floor(wsum/4), q3 the first cum > floor(3 wsum/4).
  const double q1v = std::floor(wsum / 4), q3v = std::floor(wsum * 3 / 4);
  const size_t q1 = static_cast<size_t>(std::lower_bound(cum.begin(), cum.end(), q1v) - cum.begin());
  const size_t q3 = static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), q3v) - cum.begin());
  const double iqr = obs[std::min(obs.size() - 1, q3)] - obs[std::min(obs.size() - 1, q1)];
  sigma = 1.059 * std::min(iqr / 1.34, sigma) * std::pow(wsum, -0.2);
  sigma = std::max(sigma, 0.5 / 1.64);
  std::vector<double> mus = obs, sigmas(obs.size(), sigma);
  mus.push_back((low + high) / 2);
  sigmas.push_back(high - low + 1);
  for (size_t k = 0; k < mus.size(); ++k) {
    const double norm = hpo::truncnorm::log_gauss_mass((low - 0.5 - mus[k]) / sigmas[k],
                                                       (high + 0.5 - mus[k]) / sigmas[k]);
    for (size_t x = 0; x < n; ++x) {
      const double xv = static_cast<double>(x);
      const double mass = hpo::truncnorm::log_gauss_mass((xv - 0.5 - mus[k]) / sigmas[k],
                                                         (xv + 0.5 - mus[k]) / sigmas[k]);
      pdf[x] += mix[k] * std::exp(mass - norm);
    }
  }
  return pdf;
}

double pearson_divergence(const std::string& param, const Distribution& d,
                          const std::vector<const Trial*>& top,
                          const std::vector<const Trial*>& region, const PedAnovaOptions& o) {
  const bool categorical = d.kind == Distribution::Kind::Categorical;
  std::vector<double> p_top = parzen_pdf(grid_counts(param, d, top, o.n_steps), categorical,
                                         o.prior_weight);
  std::vector<double> p_local;
  if (o.evaluate_on_local)
    p_local = parzen_pdf(grid_counts(param, d, region, o.n_steps), categorical, o.prior_weight);
  else
    p_local.assign(p_top.size(), 1.0 / static_cast<double>(p_top.size()));
  double div = 0;
  for (size_t i = 0; i < p_top.size(); ++i) {
    const double t = p_top[i] + 1e-12, l = p_local[i] + 1e-12;
    div += l * (t / l - 1) * (t / l - 1);
  }
  return div;
}

// optuna's _QuantileFilter: the trials whose loss is <= the ceil(q n)-th smallest loss.
std::vector<const Trial*> top_quantile(const std::vector<const Trial*>& trials, double q,
                                       hpo::Direction direction) {
  if (q == 1.0) return trials;
  const double sign = direction == hpo::Direction::Minimize ? 1.0 : -1.0;
  std::vector<double> loss;
  for (const Trial* t : trials) loss.push_back(sign * *t->value);
  std::vector<double> sorted = loss;
  const size_t cut = static_cast<size_t>(std::ceil(q * static_cast<double>(loss.size()))) - 1;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(cut), sorted.end());
  const double cutoff = sorted[cut];
  std::vector<const Trial*> out;
  for (size_t i = 0; i < trials.size(); ++i)
    if (loss[i] <= cutoff) out.push_back(trials[i]);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, double>> ped_anova_importances(
    const std::vector<Trial>& trials, hpo::Direction direction, const PedAnovaOptions& o) {
  std::vector<const Trial*> complete;
  std::vector<std::string> params;
  for (const Trial& t : trials) {
    if (t.state != hpo::TrialState::Complete) continue;
    for (const auto& [name, d] : t.distributions)
      if (std::find(params.begin(), params.end(), name) == params.end()) params.push_back(name);
    if (t.value && std::isfinite(*t.value)) complete.push_back(&t);
  }
  std::map<std::string, double> importance;
  for (const std::string& p : params) importance[p] = 0.0;
  if (complete.size() > 1) {
    const std::vector<const Trial*> top = top_quantile(complete, o.target_quantile, direction);
    const std::vector<const Trial*> region = top_quantile(complete, o.region_quantile, direction);
    const double quantile = static_cast<double>(top.size()) / static_cast<double>(region.size());
    for (const std::string& p : params) {
      // Regimes: the region's trials grouped by this parameter's distribution (absent: skipped).
      std::vector<std::pair<Distribution, std::vector<const Trial*>>> regimes;
      for (const Trial* t : region) {
        const auto it = t->distributions.find(p);
        if (it == t->distributions.end()) continue;
        auto r = std::find_if(regimes.begin(), regimes.end(),
                              [&](const auto& g) { return g.first == it->second; });
        if (r == regimes.end()) regimes.push_back({it->second, {t}});
        else r->second.push_back(t);
      }
      for (const auto& [d, regime] : regimes) {
        if (static_cast<int>(regime.size()) < o.min_trials_in_regime || single(d)) continue;
        std::vector<const Trial*> regime_top;
        for (const Trial* t : regime)
          if (std::find(top.begin(), top.end(), t) != top.end()) regime_top.push_back(t);
        if (regime_top.empty()) continue;
        const double alpha = static_cast<double>(regime_top.size()) / static_cast<double>(top.size());
        const double beta = static_cast<double>(regime.size()) / static_cast<double>(region.size());
        importance[p] += alpha * alpha / beta * pearson_divergence(p, d, regime_top, regime, o);
      }
    }
    for (auto& [p, v] : importance) v *= quantile * quantile;
  }
  std::vector<std::pair<std::string, double>> out(importance.begin(), importance.end());
  double sum = 0;
  for (const auto& [p, v] : out) sum += v;
  for (auto& [p, v] : out) v = sum == 0 ? 1.0 / static_cast<double>(out.size()) : v / sum;
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace ftune::report
