// Study charts (study_view.h): each drawn from the trials as stored. History and slices use the
// COMPLETE trials (their objective values); intermediate values and folds every trial that
// reported them, pruned ones drawn as such; importances are PED-ANOVA's (ped_anova.h).
#include "report/study_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hpo/study_cost.h"
#include "report/ped_anova.h"
#include "report/svg_chart.h"

namespace ftune::report {
namespace {

using hpo::Distribution;
using hpo::Trial;
using hpo::TrialState;

bool better(double a, double b, hpo::Direction d) {
  return d == hpo::Direction::Minimize ? a < b : a > b;
}

bool complete(const Trial& t) {
  return t.state == TrialState::Complete && t.value && std::isfinite(*t.value);
}

// The axis of a parameter: log for log-scaled ones, its choices for categorical ones.
Axis param_axis(const hpo::ParamSpec& p) {
  Axis a;
  a.label = p.name;
  a.log = p.dist.log;
  if (p.dist.kind == Distribution::Kind::Categorical) a.categories = p.dist.choices;
  return a;
}

std::string element_id(const std::string& prefix, const std::string& name) {
  std::string id = prefix;
  for (char c : name) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return id;
}

Section history(const StudyData& s) {
  Chart chart{"study-history", "Optimisation history", {"trial"}, {"objective value"}};
  Series values{"objective value", {}, false, true, ""};
  Series best{"best so far", {}, true, false, ""};
  std::optional<double> best_value;
  for (const Trial& t : s.trials) {
    if (!complete(t)) continue;
    const double n = static_cast<double>(t.number);
    if (!best_value || better(*t.value, *best_value, s.info.direction)) best_value = t.value;
    values.points.push_back(
        {n, *t.value, fmt::format("trial {}: {}", t.number, short_number(*t.value)), ""});
    best.points.push_back({n, *best_value, "", ""});
  }
  chart.series = {values, best};
  chart.note = fmt::format("Complete trials ({}); the line is the best value so far ({}).",
                           values.points.size(), hpo::direction_name(s.info.direction));
  return {"study-history-view", "Optimisation history",
          values.points.empty() ? missing_note("no trial has completed yet") : svg_xy_chart(chart)};
}

// The best complete value against the compute the study had used (every trial's own time summed)
// and against wall-clock time since its first trial started: with one worker the two agree; with
// several (or trials side by side) wall time runs behind compute.
Section cost_curve(const StudyData& s) {
  const hpo::StudyCost cost = hpo::study_cost(s.trials, s.info.direction, s.read_time);
  const double span = std::max(cost.compute_s(), cost.wall_s);
  const bool hours = span >= 2 * 3600;
  const double unit = hours ? 3600 : 60;
  Chart chart{"study-cost",
              "Best value against compute",
              {hours ? "hours" : "minutes"},
              {"best value so far"}};
  Series compute{"by compute (trial time summed)", {}, true, true, ""};
  Series wall{"by wall-clock time", {}, true, false, ""};
  for (const hpo::StudyCost::Point& p : cost.best_curve) {
    const std::string tip =
        fmt::format("trial {}: {} after {} of compute, {} of wall time", p.trial,
                    short_number(p.best), hpo::cost_text(p.compute_s), hpo::cost_text(p.wall_s));
    compute.points.push_back({p.compute_s / unit, p.best, tip, ""});
    wall.points.push_back({p.wall_s / unit, p.best, tip, ""});
  }
  chart.series = {compute, wall};
  chart.note = fmt::format(
      "Each point is a new best complete trial. Compute so far: {} ({} complete, {} pruned, {} "
      "failed, {} running); wall time {}.",
      hpo::cost_text(cost.compute_s()), hpo::cost_text(cost.complete_s),
      hpo::cost_text(cost.pruned_s), hpo::cost_text(cost.failed_s), hpo::cost_text(cost.running_s),
      hpo::cost_text(cost.wall_s));
  return {
      "study-cost-view", "Best value against compute",
      compute.points.empty() ? missing_note("no trial has completed yet") : svg_xy_chart(chart)};
}

Section intermediate(const StudyData& s) {
  Chart chart{"study-intermediate", "Intermediate values", {"step"}, {"reported value"}};
  chart.legend = false;
  size_t pruned = 0;
  for (const Trial& t : s.trials) {
    if (t.intermediate.empty()) continue;
    const bool is_pruned = t.state == TrialState::Pruned;
    pruned += is_pruned;
    Series series{fmt::format("trial {}", t.number), {}, true, true, is_pruned ? "pruned" : ""};
    for (const auto& [step, v] : t.intermediate)
      series.points.push_back({static_cast<double>(step), v,
                               fmt::format("trial {} ({}) step {}: {}", t.number,
                                           hpo::to_string(t.state), step, short_number(v)),
                               is_pruned ? "pruned" : ""});
    chart.series.push_back(std::move(series));
  }
  chart.note = fmt::format("One line per trial ({} trials); pruned trials ({}) in orange, their "
                           "last report is where they were stopped.",
                           chart.series.size(), pruned);
  return {"study-intermediate-view", "Intermediate values",
          chart.series.empty() ? missing_note("intermediate values: no trial reported any")
                               : svg_xy_chart(chart)};
}

Section folds(const StudyData& s) {
  Chart chart{"study-folds", "Per-fold values", {"fold"}, {"fold value"}};
  chart.legend = false;
  for (const Trial& t : s.trials) {
    if (t.fold_values.empty()) continue;
    const bool is_pruned = t.state == TrialState::Pruned;
    Series series{fmt::format("trial {}", t.number), {}, true, true, is_pruned ? "pruned" : ""};
    for (const auto& [fold, v] : t.fold_values)
      series.points.push_back({static_cast<double>(fold), v,
                               fmt::format("trial {} fold {}: {}", t.number, fold, short_number(v)),
                               is_pruned ? "pruned" : ""});
    chart.series.push_back(std::move(series));
  }
  chart.note = "One line per trial across its folds (k-fold searches: `folds` in the search file).";
  return {"study-folds-view", "Per-fold values",
          chart.series.empty() ? missing_note("fold values: this study has no k-fold trials")
                               : svg_xy_chart(chart)};
}

Section parallel(const StudyData& s) {
  ParallelChart chart;
  chart.id = "study-parallel";
  chart.title = "Parallel coordinates";
  for (const hpo::ParamSpec& p : s.space.params()) chart.axes.push_back(param_axis(p));
  chart.axes.push_back(Axis("objective value"));
  for (const Trial& t : s.trials) {
    if (!complete(t)) continue;
    std::vector<std::optional<double>> row;
    for (const hpo::ParamSpec& p : s.space.params()) {
      const auto it = t.params.find(p.name);
      row.push_back(it == t.params.end() ? std::nullopt : std::optional<double>(it->second));
    }
    row.push_back(*t.value);
    chart.rows.push_back(std::move(row));
    chart.color.push_back(s.info.direction == hpo::Direction::Minimize ? -*t.value : *t.value);
    chart.row_titles.push_back(fmt::format("trial {}: {}", t.number, short_number(*t.value)));
  }
  chart.note = "One line per complete trial; brighter is better.";
  return {"study-parallel-view", "Parallel coordinates",
          chart.rows.empty() ? missing_note("no trial has completed yet")
                             : svg_parallel_chart(chart)};
}

Section slices(const StudyData& s) {
  std::string html = "<div class=\"grid2\">";
  size_t drawn = 0;
  for (const hpo::ParamSpec& p : s.space.params()) {
    Chart chart{element_id("study-slice-", p.name), "Slice: " + p.name, param_axis(p),
                {"objective value"}};
    Series series{p.name, {}, false, true, ""};
    for (const Trial& t : s.trials) {
      if (!complete(t)) continue;
      const auto it = t.params.find(p.name);
      if (it == t.params.end()) continue;
      series.points.push_back({it->second, *t.value,
                               fmt::format("trial {}: {} = {}, value {}", t.number, p.name,
                                           param_text(s, p.name, it->second),
                                           short_number(*t.value)),
                               ""});
    }
    chart.legend = false;
    chart.series.push_back(std::move(series));
    html += svg_xy_chart(chart);
    ++drawn;
  }
  html += "</div>";
  return {"study-slices-view", "Slice plots",
          drawn == 0 ? missing_note("the study has no parameters") : html};
}

Section importances(const StudyData& s) {
  const auto imp = ped_anova_importances(s.trials, s.info.direction);
  size_t complete_trials = 0;
  for (const Trial& t : s.trials) complete_trials += complete(t);
  BarChart chart{"study-importances", "Hyperparameter importances (PED-ANOVA)", ""};
  std::vector<std::optional<double>> values;
  for (const auto& [name, v] : imp) {
    chart.categories.push_back(name);
    values.push_back(v);
  }
  chart.series.push_back({"importance", values});
  chart.note =
      "PED-ANOVA as Optuna 5 computes it (PedAnovaImportanceEvaluator defaults: the top 10 % of "
      "complete trials against all of them, normalised to sum to 1; checked against Optuna on "
      "fixture studies).";
  if (complete_trials < 2)
    return {"study-importances-view", "Hyperparameter importances",
            missing_note("importances: they need at least 2 complete trials")};
  return {"study-importances-view", "Hyperparameter importances", svg_bar_chart(chart)};
}

}  // namespace

std::vector<Section> study_sections(const StudyData& s) {
  return {study_overview(s), history(s), cost_curve(s), intermediate(s),       folds(s),
          parallel(s),       slices(s),  importances(s), study_trials_table(s)};
}

Page study_page(const StudyData& s) {
  Page page;
  page.title = "ftune study: " + s.info.name;
  page.subtitle = fmt::format("{} trials in {}", s.trials.size(), s.storage);
  page.sections = study_sections(s);
  return page;
}

}  // namespace ftune::report
