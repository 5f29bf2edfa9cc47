// Samplers: every proposal lies in the space (bounds, steps, log scale, conditions), random and
// QMC draws are reproducible per (seed, trial), QMC has lower discrepancy than random, grid
// exhausts its points in Optuna's order, TPE beats random on a quadratic and spreads parallel
// proposals with the constant liar; config errors name the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "hpo/grid_sampler.h"
#include "hpo/qmc_sampler.h"
#include "hpo/sampler.h"
#include "hpo/tpe_sampler.h"
#include "io/json_file.h"
#include "test_util.h"

namespace ftune::hpo {
namespace {

const char* kSpace = R"(
lr: {type: float, low: 1.0e-5, high: 1.0e-1, log: true}
batch: {type: int, low: 8, high: 64, step: 8}
dropout: {type: float, low: 0.0, high: 0.3, step: 0.1}
layers: {type: int, low: 1, high: 100, log: true}
x: {type: float, low: -2, high: 3}
peft: {type: categorical, choices: [none, lora, dora]}
rank: {type: int, low: 4, high: 64, when: {peft: lora}}
)";

SearchSpace space(const char* yaml = kSpace) {
  return SearchSpace::parse(YAML::Load(yaml), "space");
}

std::unique_ptr<Sampler> sampler(const std::string& yaml, uint64_t seed = 1,
                                 Direction d = Direction::Minimize) {
  return make_sampler(YAML::Load(yaml), "sampler", d, seed);
}

void expect_valid(const SearchSpace& s, const Params& p) {
  for (const auto& spec : s.params()) {
    const bool active = s.active(spec, p);
    ASSERT_EQ(p.count(spec.name) > 0, active) << spec.name;
    if (!active) continue;
    const double v = p.at(spec.name);
    EXPECT_TRUE(in_domain(spec.dist, v)) << spec.name << " = " << v;
    if (spec.dist.kind == Distribution::Kind::Int) EXPECT_EQ(v, std::round(v)) << spec.name;
  }
  EXPECT_EQ(p.size(),
            static_cast<size_t>(std::count_if(s.params().begin(), s.params().end(),
                                              [&](const ParamSpec& q) { return s.active(q, p); })));
}

Trial finished(int64_t number, const Params& p, double value) {
  Trial t;
  t.id = t.number = number;
  t.state = TrialState::Complete;
  t.params = p;
  t.value = value;
  return t;
}

// A study loop: sample, evaluate, observe; returns the best value.
double run(Sampler& smp, const SearchSpace& s, int n, const std::function<double(const Params&)>& f,
           bool check = true) {
  double best = INFINITY;
  for (int i = 0; i < n; ++i) {
    const Params p = smp.sample(s, i, {});
    if (check) expect_valid(s, p);
    const double v = f(p);
    best = std::min(best, v);
    smp.observe(finished(i, p, v));
  }
  return best;
}

TEST(Samplers, EveryTypeStaysInTheSpace) {
  const SearchSpace s = space();
  for (const char* cfg :
       {"{type: random}", "{type: qmc}", "{type: qmc, qmc_type: halton}", "{type: tpe}",
        "{type: tpe, multivariate: true}", "{type: tpe, multivariate: true, group: true}",
        "{type: tpe, constant_liar: false, consider_endpoints: true}"}) {
    SCOPED_TRACE(cfg);
    auto smp = sampler(cfg);
    std::mt19937_64 rng(9);
    run(*smp, s, 60,
        [&](const Params& p) { return p.at("x") * p.at("x") + std::log(p.at("lr")) * 0.01; });
  }
}

TEST(Samplers, LogScaleSpreadsOverDecades) {
  const SearchSpace s = space("lr: {type: float, low: 1.0e-6, high: 1.0}");
  const SearchSpace slog = space("lr: {type: float, low: 1.0e-6, high: 1.0, log: true}");
  auto smp = sampler("{type: random}");
  int small = 0, small_log = 0;
  for (int i = 0; i < 2000; ++i) {
    small += smp->sample(s, i, {}).at("lr") < 1e-3;
    small_log += smp->sample(slog, i, {}).at("lr") < 1e-3;
  }
  EXPECT_LT(small, 20);                        // linear: P = 0.001
  EXPECT_NEAR(small_log / 2000.0, 0.5, 0.05);  // log: half of the decades
}

TEST(Samplers, RandomIsReproduciblePerSeedAndTrial) {
  const SearchSpace s = space();
  auto a = sampler("{type: random}", 7), b = sampler("{type: random}", 7),
       c = sampler("{type: random}", 8);
  EXPECT_EQ(a->sample(s, 3, {}), b->sample(s, 3, {}));
  EXPECT_NE(a->sample(s, 3, {}), a->sample(s, 4, {}));
  EXPECT_NE(a->sample(s, 3, {}), c->sample(s, 3, {}));
}

TEST(Samplers, IntAndStepGridValuesAreEquallyLikely) {
  const SearchSpace s = space("n: {type: int, low: 1, high: 4}");
  auto smp = sampler("{type: random}");
  std::map<double, int> count;
  for (int i = 0; i < 8000; ++i) count[smp->sample(s, i, {}).at("n")]++;
  ASSERT_EQ(count.size(), 4u);
  for (const auto& [v, c] : count) EXPECT_NEAR(c, 2000, 200) << v;
}

// Centered L2 discrepancy (Hickernell) of points in [0, 1)^d.
double centered_l2(const std::vector<std::vector<double>>& x) {
  const size_t n = x.size(), d = x[0].size();
  double a = 0, b = 0;
  for (const auto& p : x) {
    double prod = 1;
    for (double v : p) prod *= 1 + 0.5 * std::abs(v - 0.5) - 0.5 * (v - 0.5) * (v - 0.5);
    a += prod;
  }
  for (const auto& p : x)
    for (const auto& q : x) {
      double prod = 1;
      for (size_t k = 0; k < d; ++k)
        prod *= 1 + 0.5 * std::abs(p[k] - 0.5) + 0.5 * std::abs(q[k] - 0.5) -
                0.5 * std::abs(p[k] - q[k]);
      b += prod;
    }
  return std::sqrt(std::pow(13.0 / 12, d) - 2.0 / n * a + b / (double(n) * n));
}

TEST(Samplers, QmcHasLowerDiscrepancyThanRandom) {
  const size_t n = 256, d = 4;
  std::mt19937_64 rng(11);
  std::vector<std::vector<double>> random(n, std::vector<double>(d));
  for (auto& p : random)
    for (double& v : p) v = std::uniform_real_distribution<>(0, 1)(rng);
  const double d_random = centered_l2(random);
  for (auto kind : {QmcSampler::Kind::Sobol, QmcSampler::Kind::Halton}) {
    for (uint64_t seed : {1, 2}) {
      QmcSampler q(kind, true, seed);
      std::vector<std::vector<double>> pts;
      for (uint64_t i = 0; i < n; ++i) pts.push_back(q.point(d, i));
      for (const auto& p : pts)
        for (double v : p) ASSERT_TRUE(v >= 0 && v < 1);
      EXPECT_LT(centered_l2(pts), 0.5 * d_random) << int(kind) << " seed " << seed;
    }
    EXPECT_NE(QmcSampler(kind, true, 1).point(d, 5), QmcSampler(kind, true, 2).point(d, 5));
  }
}

TEST(Samplers, GridExhaustsItsPointsOnce) {
  const SearchSpace s = space(R"(
peft: {type: categorical, choices: [none, lora]}
rank: {type: int, low: 4, high: 16, step: 4, when: {peft: lora}}
dropout: {type: float, low: 0.0, high: 0.2, step: 0.1}
)");
  auto smp = sampler("{type: grid}");
  const auto n = smp->max_trials(s);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 3 * (1 + 4));  // dropout x (none | lora x 4 ranks)
  std::set<Params> seen;
  std::vector<Trial> running;
  for (int64_t i = 0; i < *n; ++i) {
    const Params p = smp->sample(s, i, running);
    expect_valid(s, p);
    EXPECT_TRUE(seen.insert(p).second) << "grid point proposed twice";
    if (i % 3 == 0) {  // some trials still running when the next is asked
      Trial t = finished(i, p, 0);
      t.state = TrialState::Running;
      running.push_back(t);
    } else {
      smp->observe(finished(i, p, 0));
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(*n));
  EXPECT_THROW(sampler("{type: grid}")->sample(space("x: {type: float, low: 0, high: 1}"), 0, {}),
               InputError);
}

TEST(Samplers, GridOrderMatchesOptuna) {
  const auto fixture = io::read_json_file(test::fixtures_dir() + "/hpo/grid.json");
  // The Optuna spaces as ftune spaces (value lists as int/stepped/categorical parameters).
  const std::vector<std::string> spaces = {
      "b: {type: int, low: 1, high: 3}\na: {type: categorical, choices: [x, y]}",
      "lr: {type: float, low: 0.1, high: 0.2, step: 0.1}\nn: {type: categorical, choices: [8, 16, "
      "32]}\n"
      "m: {type: categorical, choices: [p, q]}"};
  ASSERT_EQ(fixture["cases"].size(), spaces.size());
  for (size_t c = 0; c < spaces.size(); ++c) {
    const SearchSpace s = space(spaces[c].c_str());
    const auto grid = GridSampler::grid(s);
    const auto& expected = fixture["cases"][c]["grids"];
    std::vector<std::string> names;  // Optuna's grid tuples follow the sorted names
    for (const auto& [k, v] : fixture["cases"][c]["space"].items()) names.push_back(k);
    std::sort(names.begin(), names.end());
    auto text = [](const nlohmann::json& v) {
      return v.is_string() ? v.get<std::string>() : v.dump();
    };
    ASSERT_EQ(grid.size(), expected.size());
    std::set<std::vector<std::string>> ours, visited;
    for (size_t i = 0; i < grid.size(); ++i) {
      std::vector<std::string> point;
      for (size_t j = 0; j < names.size(); ++j) {
        point.push_back(s.external(names[j], grid[i].at(names[j])));
        EXPECT_EQ(point.back(), text(expected[i][j])) << "point " << i;
      }
      ours.insert(point);
    }
    // Optuna's study visits every point once and stops: the same set.
    const auto& seen = fixture["cases"][c]["visited"];
    EXPECT_EQ(seen.size(), grid.size());
    for (const auto& p : seen) {
      std::vector<std::string> point;
      for (const auto& v : p) point.push_back(text(v));
      visited.insert(point);
    }
    EXPECT_EQ(ours, visited);
  }
}

double quadratic(const Params& p) {
  const double x = p.at("x") - 0.7, y = p.at("y") + 1.3;
  return x * x + y * y;
}

TEST(Tpe, BeatsRandomOnAQuadraticAcrossSeeds) {
  const SearchSpace s =
      space("x: {type: float, low: -5, high: 5}\ny: {type: float, low: -5, high: 5}");
  for (const char* cfg : {"{type: tpe, multivariate: false}", "{type: tpe}"}) {
    std::vector<double> tpe, random;
    for (uint64_t seed = 0; seed < 15; ++seed) {
      auto a = sampler(cfg, seed), b = sampler("{type: random}", seed);
      tpe.push_back(run(*a, s, 50, quadratic));
      random.push_back(run(*b, s, 50, quadratic));
    }
    std::sort(tpe.begin(), tpe.end());
    std::sort(random.begin(), random.end());
    EXPECT_LT(tpe[7], 0.5 * random[7])
        << cfg << ": median best TPE " << tpe[7] << " random " << random[7];
  }
}

TEST(Tpe, MaximizingMinusFIsMinimizingF) {
  // Same seed: maximizing -f must propose exactly what minimizing f proposes (pruned trials too).
  const SearchSpace s = space();
  for (const char* cfg : {"{type: tpe, multivariate: false}", "{type: tpe}"}) {
    auto lo = sampler(cfg, 3, Direction::Minimize), hi = sampler(cfg, 3, Direction::Maximize);
    for (int i = 0; i < 40; ++i) {
      const Params p = lo->sample(s, i, {});
      ASSERT_EQ(p, hi->sample(s, i, {})) << cfg << " trial " << i;
      const double v = p.at("x") * p.at("x") + p.at("batch") / 64.0;
      Trial a = finished(i, p, v), b = finished(i, p, -v);
      if (i % 5 == 4) {
        a.state = b.state = TrialState::Pruned;
        a.intermediate = {{0, v}};
        b.intermediate = {{0, -v}};
      }
      lo->observe(a);
      hi->observe(b);
    }
  }
}

// Eight workers ask one after the other while none has finished. With the constant liar the
// trials in flight count as bad observations where they are, so later proposals avoid them:
// no two proposals land close together. Measured as the distance between the closest two of the
// eight, summed over seeds (the sum of all pairwise distances also grows with how widely l(x)
// is sampled, which the liar is not about). (Fixed seeds: the test is deterministic.)
double parallel_spread(bool multivariate, bool liar) {
  const SearchSpace s =
      space("x: {type: float, low: -5, high: 5}\ny: {type: float, low: -5, high: 5}");
  double total = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    TpeOptions o;
    o.multivariate = multivariate;
    o.constant_liar = liar;
    TpeSampler smp(o, Direction::Minimize, seed);
    run(smp, s, 30, quadratic);
    std::vector<Trial> running;
    for (int64_t k = 0; k < 8; ++k) {
      Trial t;
      t.number = 30 + k;
      t.state = TrialState::Running;
      t.params = smp.sample(s, t.number, running);
      running.push_back(t);
    }
    double nearest = INFINITY;
    for (size_t i = 0; i < running.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        nearest = std::min(nearest, std::hypot(running[i].params.at("x") - running[j].params.at("x"),
                                               running[i].params.at("y") - running[j].params.at("y")));
    total += nearest;
  }
  return total;
}

TEST(Tpe, ConstantLiarSpreadsParallelProposals) {
  for (bool multivariate : {false, true}) {
    const double on = parallel_spread(multivariate, true),
                 off = parallel_spread(multivariate, false);
    std::printf("multivariate %d: closest pair %.1f with the liar, %.1f without (sum of 20)\n",
                multivariate, on, off);
    EXPECT_GT(on, 2 * off) << "multivariate " << multivariate;
  }
}

TEST(Tpe, ObservationOrderDoesNotMatter) {
  // Workers finish out of order: feeding the same finished trials (complete, pruned, failed) in
  // any order, with the same trials in flight, gives the same proposals.
  const SearchSpace s = space();
  for (const char* cfg : {"{type: tpe, multivariate: false}", "{type: tpe}",
                          "{type: tpe, multivariate: true, group: true}"}) {
    auto gen = sampler("{type: random}", 4);
    std::vector<Trial> done, running;
    for (int i = 0; i < 60; ++i) {
      Trial t = finished(i, gen->sample(s, i, {}), 0);
      t.value = std::sin(3.0 * i);
      if (i % 7 == 3) {
        t.state = TrialState::Pruned;
        t.value.reset();
        t.intermediate = {{0, 0.5}, {i % 3, std::cos(1.0 * i)}};
      }
      if (i % 11 == 5) t.state = TrialState::Failed;
      (i >= 54 ? running : done).push_back(t);
    }
    for (auto& t : running) t.state = TrialState::Running;
    auto in_order = sampler(cfg, 9), shuffled = sampler(cfg, 9);
    for (const auto& t : done) in_order->observe(t);
    std::vector<Trial> mixed = done;
    std::shuffle(mixed.begin(), mixed.end(), std::mt19937_64(1));
    for (const auto& t : mixed) shuffled->observe(t);
    for (int64_t n = 60; n < 66; ++n) {
      const Params p = in_order->sample(s, n, running);
      expect_valid(s, p);
      EXPECT_EQ(p, shuffled->sample(s, n, running)) << cfg << " trial " << n;
    }
  }
}

TEST(Tpe, ConditionalParamsOnlyWhenActiveAndPrunedTrialsCount) {
  const SearchSpace s = space();
  for (const char* cfg : {"{type: tpe, multivariate: false}", "{type: tpe}",
                          "{type: tpe, multivariate: true, group: true}"}) {
    auto smp = make_sampler(YAML::Load(cfg), "sampler", Direction::Minimize, 5);
    std::set<double> peft_seen;
    for (int i = 0; i < 40; ++i) {
      const Params p = smp->sample(s, i, {});
      expect_valid(s, p);
      peft_seen.insert(p.at("peft"));
      Trial t = finished(i, p, p.at("x") * p.at("x"));
      if (i % 4 == 0) {  // pruned: its last report stands in for the value
        t.state = TrialState::Pruned;
        t.value.reset();
        t.intermediate = {{0, 1.0}, {1, p.at("x") * p.at("x")}};
      }
      smp->observe(t);
    }
    EXPECT_EQ(peft_seen.size(), 3u);
  }
}

TEST(Samplers, ConfigErrorsNameTheKey) {
  auto err = [](const std::string& yaml) {
    try {
      sampler(yaml);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("{type: tpe, n_startup: 3}").find("sampler.n_startup"), std::string::npos);
  EXPECT_NE(err("{type: annealing}").find("sampler.type"), std::string::npos);
  EXPECT_NE(err("{type: qmc, qmc_type: lattice}").find("sampler.qmc_type"), std::string::npos);
  EXPECT_NE(err("{type: tpe, n_ei_candidates: 0}").find("sampler.n_ei_candidates"),
            std::string::npos);
  EXPECT_NE(err("{type: tpe, multivariate: false, group: true}").find("sampler.group"),
            std::string::npos);
  EXPECT_NE(err("{type: tpe, multivariate: maybe}").find("sampler.multivariate"),
            std::string::npos);
  EXPECT_NE(err("{type: tpe, below_bandwidth_factor: 0}").find("sampler.below_bandwidth_factor"),
            std::string::npos);
  EXPECT_NE(err("{type: tpe, max_above_kernels: -1}").find("sampler.max_above_kernels"),
            std::string::npos);
  EXPECT_NE(
      err("{type: tpe, n_ei_candidates_per_dim: -2}").find("sampler.n_ei_candidates_per_dim"),
      std::string::npos);
  EXPECT_TRUE(dynamic_cast<TpeSampler*>(
      make_sampler(YAML::Node(), "sampler", Direction::Minimize, 0).get()));
}

}  // namespace
}  // namespace ftune::hpo
