// TPE's Parzen estimator against Optuna's _ParzenEstimator: for fixed observations (float, log
// float, int, log int, stepped float, categorical and a mixed 4-d space; 0 to 60 observations;
// several option sets) the log-density at fixed points must agree to 1e-9
// (tests/fixtures/hpo/parzen.json, written by tools/make_hpo_fixtures.py). Also: ftune's
// default_weights equals Optuna's formula, the estimator built from a presorted order equals
// the one that sorts, and bandwidth_factor scales the observation kernels (not the prior).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "hpo/parzen_estimator.h"
#include "hpo/truncnorm.h"
#include "io/json_file.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

Distribution dist_from(const nlohmann::json& j) {
  Distribution d;
  const std::string type = j.at("type");
  if (type == "categorical") {
    d.kind = Distribution::Kind::Categorical;
    d.choices = j.at("choices").get<std::vector<std::string>>();
    d.low = 0;
    d.high = static_cast<double>(d.choices.size() - 1);
    return d;
  }
  d.kind = type == "int" ? Distribution::Kind::Int : Distribution::Kind::Float;
  d.low = j.at("low");
  d.high = j.at("high");
  d.log = j.at("log");
  d.step = j.contains("step") ? j.at("step").get<double>() : 0.0;
  return d;
}

TEST(ParzenGolden, LogDensityMatchesOptuna) {
  const auto fixture = io::read_json_file(test::fixtures_dir() + "/hpo/parzen.json");
  size_t checked = 0;
  double worst = 0;
  for (size_t ci = 0; ci < fixture.at("cases").size(); ++ci) {
    const auto& c = fixture["cases"][ci];
    std::vector<Distribution> dists;
    std::vector<std::vector<double>> obs, points;
    for (const auto& s : c.at("space")) {
      dists.push_back(dist_from(s));
      obs.push_back(
          c.at("observations").at(s.at("name").get<std::string>()).get<std::vector<double>>());
      points.push_back(
          c.at("points").at(s.at("name").get<std::string>()).get<std::vector<double>>());
    }
    ParzenOptions o;
    o.prior_weight = c["options"]["prior_weight"];
    o.consider_magic_clip = c["options"]["consider_magic_clip"];
    o.consider_endpoints = c["options"]["consider_endpoints"];
    const ParzenEstimator pe(dists, obs, o);
    const auto expected = c.at("log_pdf").get<std::vector<double>>();
    for (size_t i = 0; i < expected.size(); ++i) {
      std::vector<double> x;
      for (const auto& column : points) x.push_back(column[i]);
      const double got = pe.log_pdf(x);
      const double err = std::abs(got - expected[i]) / std::max(1.0, std::abs(expected[i]));
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-9) << "case " << ci << " point " << i << ": ftune " << got << " Optuna "
                           << expected[i];
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000u);
  std::printf("%zu log-densities, worst relative error %.3g\n", checked, worst);
}

TEST(ParzenEstimator, DefaultWeightsRampOldObservations) {
  EXPECT_EQ(default_weights(0).size(), 0u);
  EXPECT_EQ(default_weights(24), std::vector<double>(24, 1.0));
  const auto w = default_weights(30);  // linspace(1/30, 1, 5) then 25 ones
  ASSERT_EQ(w.size(), 30u);
  EXPECT_DOUBLE_EQ(w[0], 1.0 / 30);
  EXPECT_DOUBLE_EQ(w[2], 1.0 / 30 + 2 * (1 - 1.0 / 30) / 4);
  EXPECT_DOUBLE_EQ(w[4], 1.0);
  EXPECT_DOUBLE_EQ(w[29], 1.0);
}

TEST(ParzenEstimator, PresortedOrderGivesTheSameDensity) {
  std::mt19937_64 rng(3);
  Distribution d;
  d.low = -3;
  d.high = 3;
  std::vector<std::vector<double>> obs(1);
  for (int i = 0; i < 200; ++i) obs[0].push_back(std::uniform_real_distribution<>(-3, 3)(rng));
  std::vector<std::vector<uint32_t>> order(1, std::vector<uint32_t>(200));
  std::iota(order[0].begin(), order[0].end(), 0u);
  std::sort(order[0].begin(), order[0].end(),
            [&](uint32_t a, uint32_t b) { return obs[0][a] < obs[0][b]; });
  const ParzenEstimator a({d}, obs, {}), b({d}, obs, {}, &order);
  for (double x = -3; x <= 3; x += 0.37) EXPECT_EQ(a.log_pdf({x}), b.log_pdf({x}));
}

TEST(ParzenEstimator, SamplesStayInTheDomain) {
  std::mt19937_64 rng(5);
  Distribution f{Distribution::Kind::Float, 1e-5, 1e-1, true, 0, {}};
  Distribution i{Distribution::Kind::Int, 2, 40, false, 2, {}};
  Distribution c{Distribution::Kind::Categorical, 0, 2, false, 0, {"a", "b", "c"}};
  const ParzenEstimator pe({f, i, c}, {{1e-3, 2e-2, 5e-5}, {4, 30, 12}, {0, 2, 2}}, {});
  for (const auto& p : pe.sample(rng, 2000)) {
    EXPECT_GE(p[0], 1e-5);
    EXPECT_LE(p[0], 1e-1);
    EXPECT_GE(p[1], 2);
    EXPECT_LE(p[1], 40);
    EXPECT_EQ(std::fmod(p[1], 2.0), 0.0);
    EXPECT_TRUE(p[2] == 0 || p[2] == 1 || p[2] == 2);
    EXPECT_TRUE(std::isfinite(pe.log_pdf(p)));
  }
}

TEST(ParzenEstimator, BandwidthFactorScalesObservationKernelsOnly) {
  // One observation at 0.4 on [0, 1]: Optuna's bandwidth is the farther bound, 0.6; times 0.5
  // gives 0.3. With the prior (mu 0.5, sigma 1), each kernel weighs 1/2.
  Distribution d;
  ParzenOptions o;
  o.bandwidth_factor = 0.5;
  const ParzenEstimator p({d}, {{0.4}}, o);
  for (double x : {0.0, 0.4, 0.9}) {
    const double want = std::log(0.5 * std::exp(truncnorm::logpdf(x, -0.4 / 0.3, 0.6 / 0.3, 0.4, 0.3)) +
                                 0.5 * std::exp(truncnorm::logpdf(x, -0.5, 0.5, 0.5, 1.0)));
    EXPECT_NEAR(p.log_pdf({x}), want, 1e-12) << x;
  }
}

}  // namespace
}  // namespace ftune::hpo
