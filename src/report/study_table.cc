// The study's overview (state counts, best trial) and its trials table (study_view.h). The table
// has one row per trial — number, state, value, duration, what it retries, every parameter as
// written in a config, each fold's value, the last intermediate value, the error — sortable by
// any column and filterable by text (assets/report.js).
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <set>

#include "hpo/study_cost.h"
#include "hpo/study_report.h"
#include "report/study_view.h"
#include "report/svg_chart.h"

namespace ftune::report {
namespace {

std::string cell(const std::string& text, bool is_text = false) {
  return std::string(is_text ? "<td class=\"text\">" : "<td>") + escape_html(text) + "</td>";
}

std::string number_cell(std::optional<double> v) {
  if (!v) return "<td></td>";
  return fmt::format("<td data-value=\"{}\">{}</td>", *v, escape_html(short_number(*v)));
}

}  // namespace

Section study_overview(const StudyData& study) {
  std::array<int64_t, 5> counts{};
  int64_t retried = 0;
  for (const hpo::Trial& t : study.trials) {
    ++counts[static_cast<int>(t.state)];
    retried += t.retry_of >= 0;
  }
  std::string html = key_value_table({{"study", study.info.name},
                                      {"storage", study.storage},
                                      {"direction", hpo::direction_name(study.info.direction)},
                                      {"trials", std::to_string(study.trials.size())}});
  html += "<p class=\"counts\" id=\"study-counts\">";
  const std::pair<const char*, int64_t> shown[] = {
      {"running", counts[static_cast<int>(hpo::TrialState::Running)]},
      {"waiting", counts[static_cast<int>(hpo::TrialState::Waiting)]},
      {"complete", counts[static_cast<int>(hpo::TrialState::Complete)]},
      {"pruned", counts[static_cast<int>(hpo::TrialState::Pruned)]},
      {"failed", counts[static_cast<int>(hpo::TrialState::Failed)]},
      {"retries", retried}};
  for (const auto& [name, n] : shown)
    html += fmt::format("<span data-state=\"{}\">{}: <b>{}</b></span>", name, name, n);
  html += "</p>";
  const hpo::StudyCost cost = hpo::study_cost(study.trials, study.info.direction, study.read_time);
  html += key_value_table(
      {{"compute", fmt::format("{} of trial time (complete {}, pruned {}, failed {}, running {})",
                               hpo::cost_text(cost.compute_s()), hpo::cost_text(cost.complete_s),
                               hpo::cost_text(cost.pruned_s), hpo::cost_text(cost.failed_s),
                               hpo::cost_text(cost.running_s))},
       {"wall time", hpo::cost_text(cost.wall_s)}});
  if (const auto best = hpo::best_complete_trial(study.trials, study.info.direction)) {
    std::string params;
    for (const auto& [name, v] : best->params)
      params += (params.empty() ? "" : ", ") + name + "=" + param_text(study, name, v);
    html += key_value_table({{"best trial", std::to_string(best->number)},
                             {"best value", short_number(*best->value)},
                             {"best params", params}});
  } else {
    html += missing_note("a best trial: no trial has completed yet");
  }
  return {"study-overview", "Overview", html};
}

Section study_trials_table(const StudyData& study) {
  std::vector<std::string> params;
  for (const hpo::ParamSpec& p : study.space.params()) params.push_back(p.name);
  std::set<int64_t> folds;
  for (const hpo::Trial& t : study.trials)
    for (const auto& [k, v] : t.fold_values) folds.insert(k);
  std::string html =
      "<input class=\"table-filter\" type=\"search\" placeholder=\"filter rows: e.g. PRUNED, "
      "or a parameter value\" aria-label=\"filter trials\">"
      "<table class=\"data sortable\" id=\"study-trials\"><thead><tr><th>number</th>"
      "<th class=\"text\">state</th><th>value</th><th>duration s</th><th>retry of</th>";
  for (const std::string& p : params) html += "<th>" + escape_html(p) + "</th>";
  for (int64_t k : folds) html += fmt::format("<th>fold {}</th>", k);
  html += "<th>last step</th><th>last intermediate</th><th class=\"text\">error</th></tr></thead><tbody>";
  for (const hpo::Trial& t : study.trials) {
    html += fmt::format("<tr class=\"state-{}\" data-number=\"{}\">", hpo::to_string(t.state),
                        t.number);
    html += number_cell(static_cast<double>(t.number));
    html += cell(hpo::to_string(t.state), true);
    html += number_cell(t.value);
    html += number_cell(t.end_time > 0 && t.start_time > 0
                            ? std::optional<double>(t.end_time - t.start_time)
                            : std::nullopt);
    html += number_cell(t.retry_of >= 0 ? std::optional<double>(static_cast<double>(t.retry_of))
                                        : std::nullopt);
    for (const std::string& p : params) {
      const auto it = t.params.find(p);
      if (it == t.params.end()) {
        html += "<td></td>";
        continue;
      }
      const std::string text = param_text(study, p, it->second);
      const bool categorical = study.space.find(p) &&
                               study.space.find(p)->dist.kind == hpo::Distribution::Kind::Categorical;
      html += categorical ? cell(text, true)
                          : fmt::format("<td data-value=\"{}\">{}</td>", it->second,
                                        escape_html(text));
    }
    for (int64_t k : folds) {
      const auto it = t.fold_values.find(k);
      html += number_cell(it == t.fold_values.end() ? std::nullopt
                                                    : std::optional<double>(it->second));
    }
    html += number_cell(t.intermediate.empty()
                            ? std::nullopt
                            : std::optional<double>(static_cast<double>(t.intermediate.rbegin()->first)));
    html += number_cell(t.last_intermediate());
    html += cell(t.error, true) + "</tr>";
  }
  html += "</tbody></table>";
  return {"study-table", "Trials", html};
}

}  // namespace ftune::report
