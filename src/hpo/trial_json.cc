// JSON forms of distributions, params and trials (see trial_json.h).
#include "hpo/trial_json.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "hpo/storage.h"

namespace ftune::hpo {

namespace {

const char* kind_name(Distribution::Kind k) {
  switch (k) {
    case Distribution::Kind::Float:
      return "float";
    case Distribution::Kind::Int:
      return "int";
    case Distribution::Kind::Categorical:
      return "categorical";
  }
  return "?";
}

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json distribution_to_json(const Distribution& d) {
  nlohmann::json j = {{"kind", kind_name(d.kind)}};
  if (d.kind == Distribution::Kind::Categorical) {
    j["choices"] = d.choices;
  } else {
    j["low"] = d.low;
    j["high"] = d.high;
    j["log"] = d.log;
    j["step"] = d.step;
  }
  return j;
}

Distribution distribution_from_json(const nlohmann::json& j, const std::string& where) {
  try {
    Distribution d;
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "categorical") {
      d.kind = Distribution::Kind::Categorical;
      d.choices = j.at("choices").get<std::vector<std::string>>();
      return d;
    }
    if (kind == "float")
      d.kind = Distribution::Kind::Float;
    else if (kind == "int")
      d.kind = Distribution::Kind::Int;
    else
      throw InputError(fmt::format("{}: unknown distribution kind '{}'", where, kind));
    d.low = j.at("low").get<double>();
    d.high = j.at("high").get<double>();
    d.log = j.at("log").get<bool>();
    d.step = j.at("step").get<double>();
    return d;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed distribution {}: {}", where, j.dump(), e.what()));
  }
}

nlohmann::json params_to_json(const Params& params,
                              const std::map<std::string, Distribution>& distributions) {
  nlohmann::json p = nlohmann::json::object(), d = nlohmann::json::object();
  for (const auto& [name, value] : params) p[name] = value;
  for (const auto& [name, dist] : distributions) d[name] = distribution_to_json(dist);
  return {{"params", p}, {"distributions", d}};
}

void params_from_json(const nlohmann::json& j, const std::string& where, Params& params,
                      std::map<std::string, Distribution>& distributions) {
  params.clear();
  distributions.clear();
  try {
    for (const auto& [name, value] : j.at("params").items()) params[name] = value.get<double>();
    for (const auto& [name, dist] : j.at("distributions").items())
      distributions[name] = distribution_from_json(dist, where);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed params {}: {}", where, j.dump(), e.what()));
  }
}

nlohmann::json trial_to_json(const Trial& t) {
  nlohmann::json j = params_to_json(t.params, t.distributions);
  j["id"] = t.id;
  j["number"] = t.number;
  j["state"] = to_string(t.state);
  j["value"] = t.value ? number_or_null(*t.value) : nlohmann::json(nullptr);
  nlohmann::json inter = nlohmann::json::object(), folds = nlohmann::json::object();
  for (const auto& [step, v] : t.intermediate) inter[std::to_string(step)] = number_or_null(v);
  for (const auto& [k, v] : t.fold_values) folds[std::to_string(k)] = number_or_null(v);
  j["intermediate"] = inter;
  j["fold_values"] = folds;
  j["error"] = t.error;
  j["retry_of"] = t.retry_of >= 0 ? nlohmann::json(t.retry_of) : nlohmann::json(nullptr);
  j["attrs"] = t.attrs;
  j["start_time"] = t.start_time;
  j["end_time"] = t.end_time;
  return j;
}

}  // namespace ftune::hpo
