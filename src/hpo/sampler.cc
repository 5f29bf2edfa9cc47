// make_sampler: reads the `sampler:` mapping (unknown keys and bad values are InputErrors naming
// the key) and builds the sampler it names; an undefined mapping gives TPE with its defaults.
#include "hpo/sampler.h"

#include <fmt/format.h>

#include <set>

#include "core/error.h"
#include "hpo/config_keys.h"
#include "hpo/grid_sampler.h"
#include "hpo/qmc_sampler.h"
#include "hpo/random_sampler.h"
#include "hpo/tpe_sampler.h"

namespace ftune::hpo {
namespace {

void check_keys(const YAML::Node& cfg, const std::string& where, const std::set<std::string>& keys,
                const std::string& type) {
  check_section_keys(cfg, where, keys, "sampler '" + type + "'");
}

template <typename T>
T get(const YAML::Node& cfg, const char* key, const std::string& where, T def, const char* what) {
  const YAML::Node n = cfg[key];
  if (!n) return def;
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}.{} must be {}", where, key, what));
  }
}

}  // namespace

std::unique_ptr<Sampler> make_sampler(const YAML::Node& cfg, const std::string& where,
                                      Direction direction, uint64_t seed) {
  if (!cfg || cfg.IsNull()) return std::make_unique<TpeSampler>(TpeOptions{}, direction, seed);
  if (!cfg.IsMap()) throw InputError(fmt::format("{} must be a mapping with a 'type'", where));
  const std::string type = get<std::string>(cfg, "type", where, "tpe", "a string");
  if (type == "random") {
    check_keys(cfg, where, {"type"}, type);
    return std::make_unique<RandomSampler>(seed);
  }
  if (type == "qmc") {
    check_keys(cfg, where, {"type", "qmc_type", "scramble"}, type);
    const auto kind = get<std::string>(cfg, "qmc_type", where, "sobol", "sobol or halton");
    if (kind != "sobol" && kind != "halton")
      throw InputError(fmt::format("{}.qmc_type must be sobol or halton, got '{}'", where, kind));
    const bool scramble = get<bool>(cfg, "scramble", where, true, "true or false");
    return std::make_unique<QmcSampler>(
        kind == "sobol" ? QmcSampler::Kind::Sobol : QmcSampler::Kind::Halton, scramble, seed);
  }
  if (type == "grid") {
    check_keys(cfg, where, {"type"}, type);
    return std::make_unique<GridSampler>();
  }
  if (type == "tpe") {
    check_keys(
        cfg, where,
        {"type", "n_startup_trials", "n_ei_candidates", "multivariate", "group", "constant_liar",
         "prior_weight", "consider_prior", "consider_magic_clip", "consider_endpoints",
         "max_above_kernels", "n_ei_candidates_per_dim", "below_bandwidth_factor"},
        type);
    TpeOptions o;
    o.n_startup_trials =
        get<int64_t>(cfg, "n_startup_trials", where, o.n_startup_trials, "an integer");
    o.n_ei_candidates =
        get<int64_t>(cfg, "n_ei_candidates", where, o.n_ei_candidates, "an integer");
    o.multivariate = get<bool>(cfg, "multivariate", where, o.multivariate, "true or false");
    o.group = get<bool>(cfg, "group", where, o.group, "true or false");
    o.constant_liar = get<bool>(cfg, "constant_liar", where, o.constant_liar, "true or false");
    o.prior_weight = get<double>(cfg, "prior_weight", where, o.prior_weight, "a number");
    o.consider_prior = get<bool>(cfg, "consider_prior", where, o.consider_prior, "true or false");
    o.consider_magic_clip =
        get<bool>(cfg, "consider_magic_clip", where, o.consider_magic_clip, "true or false");
    o.consider_endpoints =
        get<bool>(cfg, "consider_endpoints", where, o.consider_endpoints, "true or false");
    o.n_ei_candidates_per_dim = get<double>(cfg, "n_ei_candidates_per_dim", where,
                                            o.n_ei_candidates_per_dim, "a number");
    if (!(o.n_ei_candidates_per_dim >= 0))
      throw InputError(fmt::format("{}.n_ei_candidates_per_dim must be >= 0", where));
    o.below_bandwidth_factor = get<double>(cfg, "below_bandwidth_factor", where,
                                           o.below_bandwidth_factor, "a number");
    if (!(o.below_bandwidth_factor > 0))
      throw InputError(fmt::format("{}.below_bandwidth_factor must be positive", where));
    o.max_above_kernels =
        get<int64_t>(cfg, "max_above_kernels", where, o.max_above_kernels, "an integer");
    if (o.max_above_kernels < 0)
      throw InputError(fmt::format("{}.max_above_kernels must be >= 0 (0: exact)", where));
    if (o.n_startup_trials < 0)
      throw InputError(fmt::format("{}.n_startup_trials must be >= 0", where));
    if (o.n_ei_candidates < 1)
      throw InputError(fmt::format("{}.n_ei_candidates must be >= 1", where));
    if (!(o.prior_weight > 0))
      throw InputError(fmt::format("{}.prior_weight must be positive", where));
    if (o.group && !o.multivariate)
      throw InputError(fmt::format("{}.group needs multivariate: true", where));
    return std::make_unique<TpeSampler>(o, direction, seed);
  }
  throw InputError(fmt::format("{}.type must be random, qmc, grid or tpe, got '{}'", where, type));
}

}  // namespace ftune::hpo
