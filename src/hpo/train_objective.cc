// In-process training trials for the hyperparameter search (see train_objective.h).
#include "hpo/train_objective.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <filesystem>

#include "core/error.h"
#include "hpo/search_space.h"
#include "train/trainer.h"

namespace ftune::hpo {
namespace {

std::string metric_key(std::string m) {
  for (const char* prefix : {"eval.", "validation."})
    if (m.rfind(prefix, 0) == 0) m = m.substr(std::string(prefix).size());
  return m.empty() ? "macro_f1" : m;
}

double metric_of(const nlohmann::json& eval, const std::string& key, const std::string& where) {
  if (!eval.is_object() || !eval.contains(key) || !eval[key].is_number())
    throw Error(
        fmt::format("{}: the validation metrics have no number '{}' (study.metric); "
                    "does the training config have validation data?",
                    where, key));
  return eval[key].get<double>();
}

}  // namespace

TrainObjective::TrainObjective(std::string train_config, std::map<std::string, std::string> fixed,
                               std::string metric, int64_t folds)
    : train_config_(std::move(train_config)),
      fixed_(std::move(fixed)),
      metric_(metric_key(std::move(metric))),
      folds_(folds) {}

double TrainObjective::run(const Trial& trial, const SearchSpace& space, TrialReporter& reporter) {
  std::vector<std::string> overrides;
  for (const auto& [name, value] : fixed_) overrides.push_back(name + "=" + value);
  for (const ParamSpec& p : space.params()) {
    const auto it = trial.params.find(p.name);
    if (it != trial.params.end())
      overrides.push_back(p.name + "=" + space.external(p.name, it->second));
  }
  const TrainConfig base = TrainConfig::load(train_config_, overrides);
  const std::filesystem::path trial_dir =
      std::filesystem::path(base.output.dir) / fmt::format("trial-{}", trial.number);

  double sum = 0;
  for (int64_t fold = 0; fold < folds_; ++fold) {
    std::vector<std::string> o = overrides;
    std::filesystem::path dir = trial_dir;
    if (folds_ > 1) {
      o.push_back(fmt::format("data.folds={}", folds_));
      o.push_back(fmt::format("data.fold={}", fold));
      dir /= fmt::format("fold-{}", fold);
    }
    o.push_back("output.dir=" + dir.string());
    o.push_back("output.overwrite=true");
    o.push_back("eval.metric=" + metric_);  // the best checkpoint is chosen by the study metric
    const TrainConfig cfg = TrainConfig::load(train_config_, o);
    TrainOptions options;
    if (folds_ == 1)
      options.on_eval = [&](int64_t step, const nlohmann::json& eval) {
        return reporter.report(step, metric_of(eval, metric_, dir.string()));
      };
    nlohmann::json summary;
    try {
      summary = run_training(cfg, options);
    } catch (const Interrupted& e) {
      // The trainer's own handler took the signal (and saved a checkpoint); hand it on to the
      // worker's handler so that no further trial starts.
      std::raise(e.signal());
      throw;
    }
    if (summary.value("status", "") == "hook") throw TrialPruned();
    const double value = metric_of(summary["best_eval"], metric_, dir.string());
    sum += value;
    if (folds_ > 1 && reporter.report_fold(fold, value)) throw TrialPruned();
  }
  return sum / static_cast<double>(folds_);
}

}  // namespace ftune::hpo
