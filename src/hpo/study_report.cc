// Tables, JSON and CSV of a study's trials (see study_report.h).
#include "hpo/study_report.h"

#include <fmt/format.h>

#include <set>

#include "hpo/study_cost.h"
#include "hpo/trial_json.h"

namespace ftune::hpo {

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out(1, '"');
  for (char c : s) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string number(double v) {
  return fmt::format("{}", v);
}

std::string external_or_raw(const SearchSpace& space, const std::string& name, double v) {
  return space.find(name) ? space.external(name, v) : number(v);
}

// "resumed trial 3: folds 0, 1 reused, fold 2 from step 40" for a trial's "resumed" attribute.
std::string resumed_text(const nlohmann::json& r) {
  std::string out = fmt::format("resumed trial {}", r.value("from_trial", int64_t{-1}));
  std::string parts;
  if (r.contains("folds_reused") && r["folds_reused"].is_array()) {
    std::string folds;
    for (const auto& f : r["folds_reused"]) folds += (folds.empty() ? "" : ", ") + f.dump();
    parts = fmt::format("fold{} {} reused", r["folds_reused"].size() == 1 ? "" : "s", folds);
  }
  if (r.contains("step")) {
    const std::string fold = r.contains("fold") ? fmt::format("fold {} ", r["fold"].dump()) : "";
    parts += fmt::format("{}{}from step {}", parts.empty() ? "" : ", ", fold, r["step"].dump());
  }
  return parts.empty() ? out : out + ": " + parts;
}

// An attribute's value for a CSV cell: strings as they are, anything else as JSON.
std::string attr_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

std::optional<Trial> best_complete_trial(const std::vector<Trial>& trials, Direction direction) {
  const Trial* best = nullptr;
  for (const Trial& t : trials) {
    if (t.state != TrialState::Complete || !t.value) continue;
    const bool better =
        !best ||
        (direction == Direction::Minimize ? *t.value < *best->value : *t.value > *best->value) ||
        (*t.value == *best->value && t.number < best->number);
    if (better) best = &t;
  }
  if (!best) return std::nullopt;
  return *best;
}

std::string status_table(const StudyInfo& study, const SearchSpace& space,
                         const std::vector<Trial>& trials, double now) {
  int64_t counts[5] = {};
  for (const Trial& t : trials) ++counts[static_cast<int>(t.state)];
  std::string out = fmt::format(
      "study '{}' ({}): {} trials: {} complete, {} pruned, {} failed, {} running, {} waiting\n",
      study.name, direction_name(study.direction), trials.size(), counts[2], counts[3], counts[4],
      counts[1], counts[0]);
  if (auto best = best_complete_trial(trials, study.direction)) {
    out += fmt::format("best: trial {} value {}", best->number, *best->value);
    for (const auto& [n, v] : best->params)
      out += fmt::format(" {}={}", n, external_or_raw(space, n, v));
    out += "\n";
  }
  out += cost_lines(study_cost(trials, study.direction, now));
  out += fmt::format("{:>7}  {:<9} {:>14}  {}\n", "number", "state", "value", "params");
  for (const Trial& t : trials) {
    std::string params;
    for (const auto& [n, v] : t.params)
      params += fmt::format("{}{}={}", params.empty() ? "" : " ", n, external_or_raw(space, n, v));
    if (t.retry_of >= 0) params += fmt::format(" (retry of {})", t.retry_of);
    if (t.attrs.contains("resumed")) params += " (" + resumed_text(t.attrs.at("resumed")) + ")";
    if (!t.error.empty()) params.append(" error: ").append(t.error);
    out += fmt::format("{:>7}  {:<9} {:>14}  {}\n", t.number, to_string(t.state),
                       t.value ? number(*t.value) : "-", params);
  }
  return out;
}

nlohmann::json trials_json(const StudyInfo& study, const SearchSpace& space,
                           const std::vector<Trial>& trials, std::optional<double> now) {
  nlohmann::json list = nlohmann::json::array();
  for (const Trial& t : trials) {
    nlohmann::json j = trial_to_json(t);
    nlohmann::json ext = nlohmann::json::object();
    for (const auto& [n, v] : t.params) ext[n] = external_or_raw(space, n, v);
    j["params_external"] = ext;
    list.push_back(j);
  }
  nlohmann::json out = {{"study", study.name},
                        {"direction", direction_name(study.direction)},
                        {"space", study.space},
                        {"trials", list}};
  if (now) {
    const StudyCost c = study_cost(trials, study.direction, *now);
    nlohmann::json curve = nlohmann::json::array();
    for (const StudyCost::Point& p : c.best_curve)
      curve.push_back(
          {{"compute_s", p.compute_s}, {"wall_s", p.wall_s}, {"best", p.best}, {"trial", p.trial},
           {"train_samples", p.train_samples}});
    out["cost"] = {{"compute_s", c.compute_s()}, {"wall_s", c.wall_s},
                   {"train_samples", c.train_samples},
                   {"complete_s", c.complete_s}, {"pruned_s", c.pruned_s},
                   {"failed_s", c.failed_s},     {"running_s", c.running_s},
                   {"best_curve", curve}};
  }
  return out;
}

std::string trials_csv(const SearchSpace& space, const std::vector<Trial>& trials) {
  std::set<std::string> names, attrs;
  std::set<int64_t> folds;
  for (const Trial& t : trials) {
    for (const auto& [n, v] : t.params) names.insert(n);
    for (const auto& [k, v] : t.fold_values) folds.insert(k);
    for (const auto& [k, v] : t.attrs.items()) attrs.insert(k);
  }
  std::string out = "number,state,value,start_time,end_time,duration_s,retry_of,error";
  for (const auto& n : names) out.append(",").append(csv_field(fmt::format("params_{}", n)));
  for (int64_t k : folds) out += fmt::format(",fold_{}", k);
  for (const auto& k : attrs) out.append(",").append(csv_field("attrs_" + k));
  out += ",last_step,last_intermediate\n";
  for (const Trial& t : trials) {
    out += fmt::format("{},{},{},{},{},{},{},{}", t.number, to_string(t.state),
                       t.value ? number(*t.value) : "", number(t.start_time),
                       t.end_time > 0 ? number(t.end_time) : "",
                       t.end_time > 0 ? number(t.end_time - t.start_time) : "",
                       t.retry_of >= 0 ? std::to_string(t.retry_of) : "", csv_field(t.error));
    for (const auto& n : names) {
      auto it = t.params.find(n);
      out.append(",");
      if (it != t.params.end()) out.append(csv_field(external_or_raw(space, n, it->second)));
    }
    for (int64_t k : folds) {
      auto it = t.fold_values.find(k);
      out.append(",");
      if (it != t.fold_values.end()) out.append(number(it->second));
    }
    for (const auto& k : attrs) {
      out.append(",");
      if (t.attrs.contains(k)) out.append(csv_field(attr_text(t.attrs.at(k))));
    }
    if (t.intermediate.empty())
      out += ",,";
    else
      out += fmt::format(",{},{}", t.intermediate.rbegin()->first,
                         number(t.intermediate.rbegin()->second));
    out += "\n";
  }
  return out;
}

}  // namespace ftune::hpo
