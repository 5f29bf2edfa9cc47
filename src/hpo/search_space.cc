// Parsing, validation and canonical form of the search space (see search_space.h).
#include "hpo/search_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/error.h"

namespace ftune::hpo {
namespace {

const std::set<std::string> kKeys = {"type", "low", "high", "log", "step", "choices", "when"};

double read_number(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw InputError(fmt::format("{} must be a number", where));
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{} must be a number, got '{}'", where, n.Scalar()));
  }
}

int64_t read_int(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw InputError(fmt::format("{} must be an integer", where));
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{} must be an integer, got '{}'", where, n.Scalar()));
  }
}

bool read_bool(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw InputError(fmt::format("{} must be true or false", where));
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{} must be true or false, got '{}'", where, n.Scalar()));
  }
}

ParamSpec parse_param(const std::string& name, const YAML::Node& node, const std::string& at) {
  if (!node.IsMap())
    throw InputError(fmt::format("{} must be a mapping with 'type' and its bounds or choices", at));
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!kKeys.count(key))
      throw InputError(fmt::format(
          "{}.{}: unknown key (expected type, low, high, log, step, choices, when)", at, key));
  }
  if (!node["type"]) throw InputError(fmt::format("{}.type is missing", at));
  const std::string type = node["type"].as<std::string>();
  ParamSpec p;
  p.name = name;
  Distribution& d = p.dist;
  auto forbid = [&](const char* key) {
    if (node[key])
      throw InputError(fmt::format("{}.{}: not allowed for a {} parameter", at, key, type));
  };
  if (type == "float" || type == "int") {
    forbid("choices");
    if (!node["low"]) throw InputError(fmt::format("{}.low is missing", at));
    if (!node["high"]) throw InputError(fmt::format("{}.high is missing", at));
    d.kind = type == "float" ? Distribution::Kind::Float : Distribution::Kind::Int;
    if (d.kind == Distribution::Kind::Float) {
      d.low = read_number(node["low"], at + ".low");
      d.high = read_number(node["high"], at + ".high");
    } else {
      d.low = static_cast<double>(read_int(node["low"], at + ".low"));
      d.high = static_cast<double>(read_int(node["high"], at + ".high"));
    }
    if (!std::isfinite(d.low) || !std::isfinite(d.high))
      throw InputError(fmt::format("{}.low/high must be finite", at));
    if (d.low > d.high)
      throw InputError(
          fmt::format("{}.low ({}) must not exceed {}.high ({})", at, d.low, at, d.high));
    if (node["log"]) d.log = read_bool(node["log"], at + ".log");
    if (node["step"]) {
      if (d.log) throw InputError(fmt::format("{}.step: a log-scaled parameter takes no step", at));
      d.step = d.kind == Distribution::Kind::Float
                   ? read_number(node["step"], at + ".step")
                   : static_cast<double>(read_int(node["step"], at + ".step"));
      if (!(d.step > 0)) throw InputError(fmt::format("{}.step must be positive", at));
    } else if (d.kind == Distribution::Kind::Int) {
      d.step = 1;
    }
    if (d.log && d.kind == Distribution::Kind::Float && d.low <= 0)
      throw InputError(fmt::format("{}.low must be positive for a log-scaled parameter", at));
    if (d.log && d.kind == Distribution::Kind::Int && d.low < 1)
      throw InputError(fmt::format("{}.low must be at least 1 for a log-scaled integer", at));
    if (d.step > 0) {  // like Optuna, the top of the range is the last value on the grid
      const double n = std::floor((d.high - d.low) / d.step + 1e-9);
      d.high = d.kind == Distribution::Kind::Int ? d.low + n * d.step
                                                 : std::min(d.high, d.low + n * d.step);
    }
  } else if (type == "categorical") {
    for (const char* key : {"low", "high", "log", "step"}) forbid(key);
    const YAML::Node& c = node["choices"];
    if (!c || !c.IsSequence() || c.size() == 0)
      throw InputError(fmt::format("{}.choices must be a non-empty list", at));
    d.kind = Distribution::Kind::Categorical;
    d.low = 0;
    d.high = static_cast<double>(c.size() - 1);
    for (const auto& item : c) {
      if (!item.IsScalar())
        throw InputError(fmt::format("{}.choices must be a list of scalars", at));
      if (std::find(d.choices.begin(), d.choices.end(), item.Scalar()) != d.choices.end())
        throw InputError(fmt::format("{}.choices: '{}' appears twice", at, item.Scalar()));
      d.choices.push_back(item.Scalar());
    }
  } else {
    throw InputError(fmt::format("{}.type must be float, int or categorical, got '{}'", at, type));
  }
  if (const YAML::Node& w = node["when"]) {
    if (!w.IsMap() || w.size() == 0)
      throw InputError(fmt::format("{}.when must be a mapping parameter -> value", at));
    for (const auto& kv : w) {
      if (!kv.second.IsScalar())
        throw InputError(
            fmt::format("{}.when.{} must be a single value", at, kv.first.as<std::string>()));
      p.when[kv.first.as<std::string>()] = kv.second.Scalar();
    }
  }
  return p;
}

std::string format_number(double v) {
  return fmt::format("{}", v);
}

}  // namespace

double snap_to_domain(const Distribution& d, double v) {
  if (d.kind == Distribution::Kind::Categorical) {
    v = std::round(v);
  } else if (d.step > 0) {
    v = d.low + std::round((v - d.low) / d.step) * d.step;
  }
  return std::clamp(v, d.low, d.high);
}

bool in_domain(const Distribution& d, double v) {
  if (!(v >= d.low && v <= d.high)) return false;
  if (d.kind == Distribution::Kind::Categorical) return v == std::round(v);
  if (d.step > 0) {
    const double k = (v - d.low) / d.step;
    return std::abs(k - std::round(k)) < 1e-8;
  }
  return true;
}

SearchSpace SearchSpace::parse(const YAML::Node& space, const std::string& where) {
  if (!space || !space.IsMap() || space.size() == 0)
    throw InputError(fmt::format("{} must be a non-empty mapping of parameter names", where));
  SearchSpace s;
  for (const auto& kv : space) {
    const std::string name = kv.first.as<std::string>();
    if (name.empty()) throw InputError(fmt::format("{}: a parameter name is empty", where));
    if (s.index_.count(name))
      throw InputError(fmt::format("{}.{}: parameter appears twice", where, name));
    s.index_[name] = s.params_.size();
    s.params_.push_back(parse_param(name, kv.second, where + "." + name));
  }
  s.finish(where);
  return s;
}

SearchSpace SearchSpace::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    throw InputError(fmt::format("{}: search space must be a JSON object", where));
  // YAML is a superset of JSON: one parser, one set of checks.
  return parse(YAML::Load(j.dump()), where);
}

// Resolves conditions and orders parameters: by name, each after the ones its condition names.
void SearchSpace::finish(const std::string& where) {
  for (const auto& p : params_) {
    for (const auto& [other, value] : p.when) {
      const std::string at = fmt::format("{}.{}.when.{}", where, p.name, other);
      auto it = index_.find(other);
      if (it == index_.end())
        throw InputError(fmt::format("{}: no parameter named '{}'", at, other));
      if (other == p.name)
        throw InputError(fmt::format("{}: a parameter cannot depend on itself", at));
      const Distribution& od = params_[it->second].dist;
      if (od.kind == Distribution::Kind::Float)
        throw InputError(
            fmt::format("{}: a condition must name a categorical or int parameter", at));
      if (od.kind == Distribution::Kind::Categorical) {
        if (std::find(od.choices.begin(), od.choices.end(), value) == od.choices.end())
          throw InputError(
              fmt::format("{}: '{}' is not one of the choices of '{}'", at, value, other));
      } else {
        double v = 0;
        try {
          v = YAML::Node(value).as<double>();
        } catch (const YAML::Exception&) {
          throw InputError(fmt::format("{}: '{}' is not an integer", at, value));
        }
        if (!in_domain(od, v))
          throw InputError(fmt::format("{}: {} is not a value of '{}'", at, value, other));
      }
    }
  }
  // Topological order, ties broken by name.
  std::vector<ParamSpec> sorted;
  std::set<std::string> placed;
  std::vector<ParamSpec> rest = params_;
  std::sort(rest.begin(), rest.end(),
            [](const ParamSpec& a, const ParamSpec& b) { return a.name < b.name; });
  while (!rest.empty()) {
    auto it = std::find_if(rest.begin(), rest.end(), [&](const ParamSpec& p) {
      return std::all_of(p.when.begin(), p.when.end(),
                         [&](const auto& kv) { return placed.count(kv.first) > 0; });
    });
    if (it == rest.end())
      throw InputError(
          fmt::format("{}.{}.when: conditions form a cycle", where, rest.front().name));
    placed.insert(it->name);
    sorted.push_back(std::move(*it));
    rest.erase(it);
  }
  params_ = std::move(sorted);
  index_.clear();
  for (size_t i = 0; i < params_.size(); ++i) index_[params_[i].name] = i;
  conditions_.assign(params_.size(), {});
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& [other, value] : params_[i].when) {
      const size_t j = index_.at(other);
      conditions_[i].push_back({j, internal(other, value)});
    }
  }
}

const ParamSpec* SearchSpace::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

bool SearchSpace::active(const ParamSpec& p, const Params& chosen) const {
  auto it = index_.find(p.name);
  FTUNE_ASSERT(it != index_.end(), "parameter '{}' is not in the search space", p.name);
  for (const auto& [j, required] : conditions_[it->second]) {
    auto c = chosen.find(params_[j].name);
    if (c == chosen.end() || c->second != required) return false;
  }
  return true;
}

std::string SearchSpace::external(const std::string& name, double internal) const {
  const ParamSpec* p = find(name);
  FTUNE_ASSERT(p, "parameter '{}' is not in the search space", name);
  const Distribution& d = p->dist;
  switch (d.kind) {
    case Distribution::Kind::Categorical: {
      const auto i = static_cast<size_t>(internal);
      FTUNE_ASSERT(internal >= 0 && i < d.choices.size(), "choice index {} of '{}'", internal,
                   name);
      return d.choices[i];
    }
    case Distribution::Kind::Int:
      return fmt::format("{}", static_cast<int64_t>(std::llround(internal)));
    case Distribution::Kind::Float:
      // A stepped float is low + k * step: print 0.3, not 0.30000000000000004.
      return d.step > 0 ? fmt::format("{:.15g}", internal) : format_number(internal);
  }
  return "";
}

double SearchSpace::internal(const std::string& name, const std::string& external) const {
  const ParamSpec* p = find(name);
  if (!p) throw InputError(fmt::format("no parameter named '{}' in the search space", name));
  const Distribution& d = p->dist;
  if (d.kind == Distribution::Kind::Categorical) {
    auto it = std::find(d.choices.begin(), d.choices.end(), external);
    if (it == d.choices.end())
      throw InputError(fmt::format("'{}' is not a choice of '{}'", external, name));
    return static_cast<double>(it - d.choices.begin());
  }
  double v = 0;
  try {
    v = YAML::Node(external).as<double>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("'{}' is not a number (parameter '{}')", external, name));
  }
  if (!in_domain(d, v))
    throw InputError(fmt::format("{} is not a value of parameter '{}'", external, name));
  return v;
}

nlohmann::json SearchSpace::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& p : params_) {
    const Distribution& d = p.dist;
    nlohmann::json e;
    switch (d.kind) {
      case Distribution::Kind::Float:
        e = {{"type", "float"}, {"low", d.low}, {"high", d.high}, {"log", d.log}};
        if (d.step > 0) e["step"] = d.step;
        break;
      case Distribution::Kind::Int:
        e = {{"type", "int"},
             {"low", static_cast<int64_t>(d.low)},
             {"high", static_cast<int64_t>(d.high)},
             {"log", d.log}};
        if (!d.log) e["step"] = static_cast<int64_t>(d.step);
        break;
      case Distribution::Kind::Categorical:
        e = {{"type", "categorical"}, {"choices", d.choices}};
        break;
    }
    if (!p.when.empty()) e["when"] = p.when;
    j[p.name] = e;
  }
  return j;
}

}  // namespace ftune::hpo
