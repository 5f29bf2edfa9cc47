// make_pruner: reads the `pruner:` mapping (unknown keys and bad values are InputErrors naming
// the key) and builds the pruner it names.
#include "hpo/pruner.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "hpo/config_keys.h"
#include "hpo/percentile_pruner.h"
#include "hpo/successive_halving_pruner.h"
#include "hpo/threshold_pruner.h"

namespace ftune::hpo {
namespace {

class NopPruner : public Pruner {
 public:
  bool should_prune(const Trial&, int64_t, const std::vector<Trial>&) const override {
    return false;
  }
};

void check_keys(const YAML::Node& cfg, const std::string& where, const std::set<std::string>& keys,
                const std::string& type) {
  check_section_keys(cfg, where, keys, "pruner '" + type + "'");
}

int64_t get_int(const YAML::Node& cfg, const char* key, const std::string& where, int64_t def,
                int64_t min) {
  const YAML::Node n = cfg[key];
  if (!n) return def;
  int64_t v = 0;
  try {
    v = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}.{} must be an integer", where, key));
  }
  if (v < min)
    throw InputError(fmt::format("{}.{} must be at least {}, got {}", where, key, min, v));
  return v;
}

// An integer >= min, or "auto" (nullopt).
std::optional<int64_t> get_auto_int(const YAML::Node& cfg, const char* key,
                                    const std::string& where, std::optional<int64_t> def,
                                    int64_t min) {
  const YAML::Node n = cfg[key];
  if (!n) return def;
  if (n.IsScalar() && n.Scalar() == "auto") return std::nullopt;
  int64_t v = 0;
  try {
    v = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}.{} must be an integer or 'auto'", where, key));
  }
  if (v < min)
    throw InputError(fmt::format("{}.{} must be at least {}, got {}", where, key, min, v));
  return v;
}

// `lower` / `upper` (numbers; absent: unbounded; lower <= upper), the other options at defaults.
ThresholdOptions get_bounds(const YAML::Node& cfg, const std::string& where) {
  ThresholdOptions o;
  auto read = [&](const char* key, double& v) {
    const YAML::Node n = cfg[key];
    if (!n) return;
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      throw InputError(fmt::format("{}.{} must be a number", where, key));
    }
    if (std::isnan(v)) throw InputError(fmt::format("{}.{} must be a number, got nan", where, key));
  };
  read("lower", o.lower);
  read("upper", o.upper);
  if (o.lower > o.upper)
    throw InputError(fmt::format("{}.lower ({}) must not be above {}.upper ({})", where, o.lower,
                                 where, o.upper));
  return o;
}

// The median, percentile, ASHA or Hyperband pruner `type` names (any other type: InputError).
std::unique_ptr<Pruner> make_ranked_pruner(const YAML::Node& cfg, const std::string& where,
                                           Direction direction, const std::string& study_name,
                                           const std::string& type) {
  if (type == "median" || type == "percentile") {
    std::set<std::string> keys = {"type", "n_startup_trials", "n_warmup_steps", "interval_steps",
                                  "n_min_trials", "lower", "upper"};
    if (type == "percentile") keys.insert("percentile");
    check_keys(cfg, where, keys, type);
    PercentileOptions o;
    if (type == "percentile") {
      if (!cfg["percentile"]) throw InputError(fmt::format("{}.percentile is missing", where));
      try {
        o.percentile = cfg["percentile"].as<double>();
      } catch (const YAML::Exception&) {
        throw InputError(fmt::format("{}.percentile must be a number", where));
      }
      if (!(o.percentile >= 0 && o.percentile <= 100))
        throw InputError(fmt::format("{}.percentile must be between 0 and 100", where));
    }
    o.n_startup_trials = get_int(cfg, "n_startup_trials", where, 5, 0);
    o.n_warmup_steps = get_int(cfg, "n_warmup_steps", where, 0, 0);
    o.interval_steps = get_int(cfg, "interval_steps", where, 1, 1);
    o.n_min_trials = get_int(cfg, "n_min_trials", where, 1, 1);
    return std::make_unique<PercentilePruner>(o, direction);
  }
  if (type == "asha") {
    check_keys(cfg, where,
               {"type", "min_resource", "reduction_factor", "min_early_stopping_rate",
                "bootstrap_count", "lower", "upper"},
               type);
    SuccessiveHalvingOptions o;
    o.min_resource = get_auto_int(cfg, "min_resource", where, std::nullopt, 1);
    o.reduction_factor = get_int(cfg, "reduction_factor", where, 4, 2);
    o.min_early_stopping_rate = get_int(cfg, "min_early_stopping_rate", where, 0, 0);
    o.bootstrap_count = get_int(cfg, "bootstrap_count", where, 0, 0);
    if (o.bootstrap_count > 0 && !o.min_resource)
      throw InputError(fmt::format("{}.bootstrap_count > 0 needs an integer min_resource", where));
    return std::make_unique<SuccessiveHalvingPruner>(o, direction);
  }
  if (type == "hyperband") {
    check_keys(cfg, where,
               {"type", "min_resource", "max_resource", "reduction_factor", "bootstrap_count",
                "lower", "upper"},
               type);
    HyperbandOptions o;
    o.min_resource = get_int(cfg, "min_resource", where, 1, 1);
    o.max_resource = get_auto_int(cfg, "max_resource", where, std::nullopt, 1);
    o.reduction_factor = get_int(cfg, "reduction_factor", where, 3, 2);
    o.bootstrap_count = get_int(cfg, "bootstrap_count", where, 0, 0);
    if (o.bootstrap_count > 0 && !o.max_resource)
      throw InputError(fmt::format("{}.bootstrap_count > 0 needs an integer max_resource", where));
    if (o.max_resource && *o.max_resource < o.min_resource)
      throw InputError(fmt::format("{}.max_resource must be at least min_resource", where));
    return std::make_unique<HyperbandPruner>(o, direction, study_name);
  }
  throw InputError(fmt::format(
      "{}.type must be none, median, percentile, asha, hyperband or threshold, got '{}'", where,
      type));
}

}  // namespace

std::unique_ptr<Pruner> make_pruner(const YAML::Node& cfg, const std::string& where,
                                    Direction direction) {
  return make_pruner(cfg, where, direction, "");
}

std::unique_ptr<Pruner> make_pruner(const YAML::Node& cfg, const std::string& where,
                                    Direction direction, const std::string& study_name,
                                    int64_t folds) {
  if (!cfg || cfg.IsNull()) return std::make_unique<NopPruner>();
  if (!cfg.IsMap()) throw InputError(fmt::format("{} must be a mapping with a 'type'", where));
  if (!cfg["type"]) throw InputError(fmt::format("{}.type is missing", where));
  const std::string type = cfg["type"].as<std::string>();
  if (type == "none") {
    check_keys(cfg, where, {"type"}, type);
    return std::make_unique<NopPruner>();
  }
  if (type == "threshold") {
    check_keys(cfg, where, {"type", "lower", "upper", "n_warmup_steps", "interval_steps"}, type);
    if (!cfg["lower"] && !cfg["upper"])
      throw InputError(fmt::format("{}: a threshold pruner needs lower, upper or both", where));
    ThresholdOptions o = get_bounds(cfg, where);
    o.n_warmup_steps = get_int(cfg, "n_warmup_steps", where, 0, 0);
    o.interval_steps = get_int(cfg, "interval_steps", where, 1, 1);
    return std::make_unique<ThresholdPruner>(o);
  }
  std::unique_ptr<Pruner> pruner = make_ranked_pruner(cfg, where, direction, study_name, type);
  if (!cfg["lower"] && !cfg["upper"]) return pruner;
  return std::make_unique<BoundedPruner>(get_bounds(cfg, where), std::move(pruner), folds > 1);
}

}  // namespace ftune::hpo
