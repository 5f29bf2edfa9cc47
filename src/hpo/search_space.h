// The search space of a study: named parameters (dotted config keys) with their distributions and
// optional conditions ("lora_rank only when peft=lora"), read from the `space:` YAML mapping.
// Values are in Optuna's internal representation (trial.h): float/int as double, categorical as
// the index of its choice; external() turns one back into the text a config override takes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "hpo/trial.h"

namespace ftune::hpo {

struct ParamSpec {
  std::string name;  // e.g. "training.learning_rate" (a dotted config key)
  Distribution dist;
  std::map<std::string, std::string> when;  // condition: other param -> required value as written
};

class SearchSpace {
 public:
  // `space` is the YAML mapping name -> {type: float|int|categorical, low, high, log, step,
  // choices, when: {other: value}}; errors (InputError) name `where` and the key. Parameters are
  // ordered by name, each after the parameters its condition names.
  static SearchSpace parse(const YAML::Node& space, const std::string& where);
  // The inverse of to_json() (InputError naming `where` when `j` is not such a form).
  static SearchSpace from_json(const nlohmann::json& j, const std::string& where);

  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec* find(const std::string& name) const;
  // Its condition holds: every parameter it names was chosen with the required value.
  bool active(const ParamSpec& p, const Params& chosen) const;
  // The value as written in a config override: "3e-05", "32", "lora".
  std::string external(const std::string& name, double internal) const;
  // The internal value of `name` for its external text (a choice, or a number); InputError if
  // the text names no value of the parameter's domain.
  double internal(const std::string& name, const std::string& external) const;
  // Canonical form; equal spaces give equal JSON.
  nlohmann::json to_json() const;

 private:
  std::vector<ParamSpec> params_;
  std::map<std::string, size_t> index_;
  // Resolved conditions: for params_[i], pairs (index of the other param, required internal value).
  std::vector<std::vector<std::pair<size_t, double>>> conditions_;

  void finish(const std::string& where);
};

// Helpers on one numeric distribution, shared by the samplers.
// Rounds `v` to the distribution's grid (step or integer) and clips it into [low, high].
double snap_to_domain(const Distribution& d, double v);
// True when `v` is a value of `d` (in range, on its grid, a valid choice index).
bool in_domain(const Distribution& d, double v);

}  // namespace ftune::hpo
