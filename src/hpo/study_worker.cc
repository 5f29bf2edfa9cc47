// One worker of a study (see study_worker.h).
#include "hpo/study_worker.h"

#include <fmt/format.h>

#include "core/error.h"
#include "hpo/command_objective.h"
#include "hpo/interrupt.h"
#include "hpo/pruner.h"
#include "hpo/sampler.h"
#include "hpo/search_space.h"
#include "hpo/study_report.h"
#include "hpo/train_objective.h"

namespace ftune::hpo {

std::unique_ptr<Objective> config_objective(const SearchConfig& c) {
  if (!c.command.empty())
    return std::make_unique<CommandObjective>(c.command, c.fixed, c.pass_args,
                                              static_cast<int>(c.folds), c.kill_grace_s);
  if (c.train_config.empty())
    throw InputError(fmt::format(
        "{}: missing key 'objective' ({{command: ...}} or {{train_config: ...}})", c.path));
  return std::make_unique<TrainObjective>(
      c.train_config, c.fixed, c.metric, c.folds,
      RankLaunch{c.trial_ranks, c.trial_launcher, c.kill_grace_s}, c.fold_reports,
      c.keep_trial_models);
}

StudyOutcome run_study_worker(const SearchConfig& c, Objective& objective) {
  if (c.storage.empty())
    throw InputError(fmt::format("{}: no storage: set 'storage:' or pass --storage URL", c.path));
  const SearchSpace space = SearchSpace::parse(c.space, c.path + ": space");
  auto sampler = make_sampler(c.sampler, c.path + ": sampler", c.direction, c.seed);
  auto pruner = make_pruner(c.pruner, c.path + ": pruner", c.direction, c.study_name, c.folds);
  try {
    objective.validate(space);  // before the storage: a config no trial can run writes nothing
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", c.path, e.what()));
  }
  auto storage = open_storage(c.storage);
  StudyOutcome out;
  out.study = storage->create_or_load_study(c.study_name, c.direction, space.to_json());
  WorkerOptions o;
  o.max_trials = c.trials;
  o.timeout_s = c.timeout_s;
  o.heartbeat_s = c.heartbeat_s;
  o.grace_s = c.grace_s;
  o.retries = static_cast<int>(c.retries);
  o.retry_failed = c.retry_failed;
  o.trial_timeout_s = c.trial_timeout_s;
  o.kill_grace_s = c.kill_grace_s;
  o.max_consecutive_failures = static_cast<int>(c.max_consecutive_failures);
  o.failure_backoff_s = c.failure_backoff_s;
  Worker worker(*storage, out.study, space, *sampler, pruner.get(), objective, o);
  out.worker = worker.run();
  out.interrupted = interrupted();
  out.counts = storage->count_by_state(out.study.id);
  out.trials = storage->trials(out.study.id);
  out.best = best_complete_trial(out.trials, c.direction);
  return out;
}

}  // namespace ftune::hpo
