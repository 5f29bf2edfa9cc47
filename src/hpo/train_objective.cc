// In-process training trials for the hyperparameter search (see train_objective.h).
#include "hpo/train_objective.h"

#include <fmt/format.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <filesystem>

#include "core/error.h"
#include "data/memory_source.h"
#include "hpo/search_space.h"
#include "io/json_file.h"
#include "train/trainer.h"

namespace ftune::hpo {
namespace {

// What sets a trial's keys on top of objective.train_config (the search space, `fixed`, `folds`
// and the trial's output): errors name it instead of blaming a command line the user never typed.
constexpr const char* kStudyOverride = "study override";

namespace fs = std::filesystem;

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

// The step of the last checkpoint in run directory `dir`; nullopt when it has none.
std::optional<int64_t> last_checkpoint_step(const fs::path& dir) {
  const fs::path index = dir / "checkpoints" / "index.json";
  if (!fs::exists(index)) return std::nullopt;
  const nlohmann::json j = io::read_json_file(index.string());
  const int64_t step = j.value("last_step", int64_t{-1});
  if (step < 0) return std::nullopt;
  return step;
}

// The study metric of a run in `dir` that ran to its end (its summary says so), else nullopt: the
// worker died after the run finished but before its fold value was stored.
std::optional<double> finished_run_value(const fs::path& dir, const std::string& metric) {
  const fs::path path = dir / "summary.json";
  if (!fs::exists(path)) return std::nullopt;
  const nlohmann::json s = io::read_json_file(path.string());
  const std::string status = s.value("status", "");
  if (status != "completed" && status != "early_stopping") return std::nullopt;
  if (!s.contains("best_eval")) return std::nullopt;
  return metric_of(s["best_eval"], metric, dir.string());
}

// The step at which an evaluation after `epochs` epochs of training (over all of a trial's folds)
// is reported when folds report by evaluation: hundredths of an epoch.
int64_t budget_step(double epochs) { return std::llround(epochs * 100.0); }

// The epochs a finished run in `dir` trained (its summary), 0 when it has no summary.
double run_epochs(const fs::path& dir) {
  const fs::path path = dir / "summary.json";
  if (!fs::exists(path)) return 0;
  return io::read_json_file(path.string()).value("epochs", 0.0);
}

// Values of a parameter that stand for its whole domain when checking a config: the bounds of a
// range (the largest value on its grid) or every choice.
std::vector<double> representative_values(const Distribution& d) {
  if (d.kind == Distribution::Kind::Categorical) {
    std::vector<double> all;
    for (size_t i = 0; i < d.choices.size(); ++i) all.push_back(static_cast<double>(i));
    return all;
  }
  const double high = snap_to_domain(d, d.high);
  return high == d.low ? std::vector<double>{d.low} : std::vector<double>{d.low, high};
}

}  // namespace

TrainObjective::TrainObjective(std::string train_config, std::map<std::string, std::string> fixed,
                               std::string metric, int64_t folds, RankLaunch launch,
                               FoldReports fold_reports, bool keep_models)
    : train_config_(std::move(train_config)),
      fixed_(std::move(fixed)),
      metric_(metric_key(std::move(metric))),
      folds_(folds),
      launch_(std::move(launch)),
      fold_reports_(fold_reports),
      keep_models_(keep_models) {}

std::vector<std::string> TrainObjective::overrides(const Params& params,
                                                   const SearchSpace& space) const {
  std::vector<std::string> o;
  for (const auto& [name, value] : fixed_) o.push_back(name + "=" + value);
  for (const ParamSpec& p : space.params()) {
    const auto it = params.find(p.name);
    if (it != params.end()) o.push_back(p.name + "=" + space.external(p.name, it->second));
  }
  return o;
}

std::vector<std::string> TrainObjective::fold_overrides(int64_t fold,
                                                        const std::string& dir) const {
  std::vector<std::string> o;
  if (folds_ > 1) {
    o.push_back(fmt::format("data.folds={}", folds_));
    o.push_back(fmt::format("data.fold={}", fold));
  }
  o.push_back("output.dir=" + dir);
  o.push_back("output.overwrite=true");
  o.push_back("eval.metric=" + metric_);  // the best checkpoint is chosen by the study metric
  if (!keep_models_) o.push_back("output.save_model=false");  // keep_trial_models false
  return o;
}

void TrainObjective::validate(const SearchSpace& space) const {
  // Every parameter at each of its representative values, the others at their first one (a
  // conditional parameter only where its condition holds), for the first and the last fold;
  // first of all, every parameter at its first value.
  auto probe = [&](const ParamSpec* varied, double value) {
    Params chosen;
    for (const ParamSpec& p : space.params()) {
      const double v = &p == varied ? value : representative_values(p.dist).front();
      if (space.active(p, chosen)) chosen[p.name] = v;
    }
    if (varied && !chosen.count(varied->name)) return;  // its condition excludes this value
    std::string others;
    for (const auto& [name, v] : chosen)
      if (!varied || name != varied->name)
        others += fmt::format("{}{}={}", others.empty() ? "" : ", ", name, space.external(name, v));
    std::string with;
    if (varied)
      with = fmt::format(" with {}={} (a value of the search space{})", varied->name,
                         space.external(varied->name, value),
                         others.empty() ? "" : "; the other parameters at " + others);
    else if (!others.empty())
      with = fmt::format(" with {} (the first values of the search space)", others);
    for (const int64_t fold : {int64_t{0}, folds_ - 1}) {
      std::vector<std::string> o = overrides(chosen, space);
      const std::vector<std::string> f = fold_overrides(fold, "trial-check");
      o.insert(o.end(), f.begin(), f.end());
      TrainConfig cfg;
      try {
        cfg = TrainConfig::load(train_config_, o, kStudyOverride);
      } catch (const InputError& e) {
        std::string how;
        if (folds_ > 1)
          how = fmt::format(
              "; each trial sets data.folds={} and data.fold=0..{} (the search's "
              "`folds`)",
              folds_, folds_ - 1);
        if (!fixed_.empty()) how += " and the search's `fixed` values";
        throw InputError(fmt::format("objective.train_config cannot run any trial{}: {}{}", with,
                                     e.what(), how));
      }
      auto must_exist = [&](const std::string& path, const char* key) {
        if (!path.empty() && !data::data_source_exists(path))
          throw InputError(fmt::format("objective.train_config {}: key '{}': {} does not exist",
                                       train_config_, key, path));
      };
      must_exist(cfg.model.path, "model.path");
      must_exist(cfg.data.train, "data.train");
      must_exist(cfg.data.validation, "data.validation");
      must_exist(cfg.data.test, "data.test");
    }
  };
  probe(nullptr, 0);
  for (const ParamSpec& p : space.params())
    for (const double v : representative_values(p.dist)) probe(&p, v);
}

TrainObjective::Continued TrainObjective::continue_retried(const Trial& trial,
                                                           TrialReporter& reporter,
                                                           const fs::path& trial_dir) const {
  Continued c;
  const Trial* failed = reporter.retried();
  if (!failed || failed->params != trial.params) return c;
  c.from = failed->number;
  // The failed trial's run directories become this trial's: its finished folds (their models)
  // and the checkpoints of the fold it was in.
  const fs::path failed_dir = trial_dir.parent_path() / fmt::format("trial-{}", failed->number);
  if (fs::exists(failed_dir) && !fs::exists(trial_dir)) {
    fs::rename(failed_dir, trial_dir);
    c.moved = true;
  } else if (fs::exists(failed_dir)) {
    spdlog::warn("trial {}: {} exists already; not continuing the runs of trial {} in {}",
                 trial.number, trial_dir.string(), failed->number, failed_dir.string());
  }
  if (folds_ > 1) c.folds = failed->fold_values;
  if (folds_ == 1 || fold_reports_ == FoldReports::Evaluations) c.intermediate = failed->intermediate;
  return c;
}

double TrainObjective::run(const Trial& trial, const SearchSpace& space, TrialReporter& reporter) {
  // A trial frees all it allocated, but glibc keeps freed mid-sized blocks in its arenas, so the
  // worker's resident set would drift by tens of MiB from trial to trial; give them back.
  struct TrimOnExit {
    ~TrimOnExit() {
#ifdef __GLIBC__
      malloc_trim(0);
#endif
    }
  } trim;
  const std::vector<std::string> trial_overrides = overrides(trial.params, space);
  const TrainConfig base = TrainConfig::load(train_config_, trial_overrides, kStudyOverride);
  const fs::path trial_dir = fs::path(base.output.dir) / fmt::format("trial-{}", trial.number);
  // A retry of a trial whose worker died continues its work: the folds it finished count as they
  // are, and the fold it was in resumes from its last checkpoint (same params, same fold split:
  // the trainer refuses a changed config), so the result equals an uninterrupted trial's.
  const Continued continued = continue_retried(trial, reporter, trial_dir);
  nlohmann::json resumed;
  if (continued.from >= 0) resumed["from_trial"] = continued.from;

  // With k folds reported by evaluation: the epochs trained in the finished folds (the trial's
  // budget so far); a retry first reports again what the trial it continues reported.
  const bool by_evaluation = folds_ > 1 && fold_reports_ == FoldReports::Evaluations;
  double epochs_before = 0;
  if (by_evaluation)
    for (const auto& [s, v] : continued.intermediate)
      if (reporter.report(s, v)) throw TrialPruned();
  // Stores a finished fold's value; the running mean goes to the pruner at the fold's number, or
  // with reports by evaluation at the budget of the fold's end (replacing its last evaluation's).
  const auto fold_done = [&](int64_t fold, double value, double fold_epochs) {
    if (folds_ == 1) return false;
    if (!by_evaluation) return reporter.report_fold(fold, value);
    epochs_before += fold_epochs;
    return reporter.report_fold(fold, value, budget_step(epochs_before));
  };

  // Training rows of the trial's runs (the study's compute in a unit the machine's speed does
  // not change; study_cost.h), recorded after each run, a pruned one's included.
  int64_t train_samples = 0;
  const auto count_rows = [&](const nlohmann::json& summary) {
    train_samples += summary.value("train_samples", int64_t{0});
    reporter.set_attr("train_samples", train_samples);
  };

  double sum = 0;
  for (int64_t fold = 0; fold < folds_; ++fold) {
    const fs::path dir = folds_ > 1 ? trial_dir / fmt::format("fold-{}", fold) : trial_dir;
    std::optional<double> value;
    if (auto it = continued.folds.find(fold); it != continued.folds.end()) value = it->second;
    if (!value && continued.moved) value = finished_run_value(dir, metric_);
    if (value) {
      resumed["folds_reused"].push_back(fold);
      reporter.set_attr("resumed", resumed);
      sum += *value;
      if (fold_done(fold, *value, run_epochs(dir))) throw TrialPruned();
      continue;
    }
    std::vector<std::string> o = trial_overrides;
    const std::vector<std::string> f = fold_overrides(fold, dir.string());
    o.insert(o.end(), f.begin(), f.end());
    const TrainConfig cfg = TrainConfig::load(train_config_, o, kStudyOverride);
    TrainOptions options;
    if (continued.moved) {
      if (const auto step = last_checkpoint_step(dir)) {
        options.resume = true;
        if (folds_ > 1) resumed["fold"] = fold;
        resumed["step"] = *step;
        reporter.set_attr("resumed", resumed);
        spdlog::info("trial {}: continuing trial {}{} from its checkpoint of step {}", trial.number,
                     continued.from, folds_ > 1 ? fmt::format(" in fold {}", fold) : "", *step);
        // The evaluations up to the checkpoint happened in the failed trial: the same values
        // (with reports by evaluation, all of them were reported again above).
        if (folds_ == 1)
          for (const auto& [s, v] : continued.intermediate)
            if (s <= *step && reporter.report(s, v)) throw TrialPruned();
      }
    }
    if (folds_ == 1)
      options.on_eval = [&](int64_t step, const nlohmann::json& eval) {
        return reporter.report(step, metric_of(eval, metric_, dir.string()));
      };
    if (by_evaluation)
      options.on_eval = [&, fold](int64_t, const nlohmann::json& eval) {
        const double v = metric_of(eval, metric_, dir.string());
        const double epochs = epochs_before + eval.value("epochs", 0.0);
        return reporter.report(budget_step(epochs), (sum + v) / static_cast<double>(fold + 1));
      };
    options.stop_requested = [&reporter] { return reporter.stop_requested(); };
    nlohmann::json summary;
    if (launch_.ranks > 1) {
      // A data-parallel trial: its ranks are processes of their own (hpo/rank_trial.h).
      const auto on_eval = [&](int64_t step, const nlohmann::json& eval) {
        return options.on_eval && options.on_eval(step, eval);
      };
      const RankRunResult r = run_trial_ranks(launch_, train_config_, o, options.resume,
                                              dir.string(), trial.number, on_eval,
                                              options.stop_requested);
      if (r.summary.is_object())
        count_rows(r.summary);
      else if (fs::exists(dir / "summary.json"))  // stopped: the ranks' summary, if they wrote one
        count_rows(io::read_json_file((dir / "summary.json").string()));
      if (r.stopped && reporter.stop_requested())
        throw Error(fmt::format("trial {}: stopped: its time is up (checkpoint saved)", trial.number));
      if (r.stopped) throw TrialPruned();
      summary = r.summary;
    } else {
      try {
        try {
          summary = run_training(cfg, options);
        } catch (const InputError& e) {
          if (!options.resume) throw;
          // The checkpoint does not fit any more (the training config or data changed since):
          // this fold starts over rather than failing the retry.
          spdlog::warn("trial {}: cannot continue {}: {}; training it from the start", trial.number,
                       dir.string(), e.what());
          resumed.erase("step");
          resumed.erase("fold");
          reporter.set_attr("resumed", resumed);
          options.resume = false;
          summary = run_training(cfg, options);
        }
      } catch (const Interrupted& e) {
        // The trainer's own handler took the signal (and saved a checkpoint); hand it on to the
        // worker's handler so that no further trial starts. Signal 0: our stop request.
        if (e.signal() != 0) std::raise(e.signal());
        throw;
      }
    }
    if (launch_.ranks <= 1) count_rows(summary);
    // Without kept models a run's checkpoints (checkpoint.every_steps, for resuming a killed
    // worker) are of no use once it has ended: its summary holds what a retry reuses.
    if (!keep_models_) fs::remove_all(dir / "checkpoints");
    if (summary.value("status", "") == "hook") throw TrialPruned();
    const double v = metric_of(summary["best_eval"], metric_, dir.string());
    sum += v;
    if (fold_done(fold, v, summary.value("epochs", 0.0))) throw TrialPruned();
  }
  return sum / static_cast<double>(folds_);
}

}  // namespace ftune::hpo
