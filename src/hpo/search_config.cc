// Parsing and validation of the search configuration (see search_config.h).
#include "hpo/search_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "core/error.h"
#include "hpo/storage.h"
#include "train/score_task.h"

namespace ftune::hpo {

namespace {

std::string at(const std::string& path, const YAML::Node& n) {
  return n.Mark().is_null() ? path : fmt::format("{}:{}", path, n.Mark().line + 1);
}

// Checks that `map` is a mapping whose keys are all in `allowed`.
void check_keys(const YAML::Node& map, const std::string& path, const std::string& section,
                const std::set<std::string>& allowed) {
  if (!map.IsMap())
    throw InputError(fmt::format("{}: {} must be a mapping", at(path, map),
                                 section.empty() ? "the search config" : "'" + section + "'"));
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = section.empty() ? key : section + "." + key;
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw InputError(fmt::format("{}: unknown key '{}' (expected one of: {})", at(path, kv.first),
                                   full, list));
    }
    if (!seen.insert(key).second)
      throw InputError(fmt::format("{}: key '{}' is given twice", at(path, kv.first), full));
  }
}

template <class T>
T get(const YAML::Node& n, const std::string& path, const std::string& key, const char* what) {
  if (!n.IsScalar())
    throw InputError(fmt::format("{}: key '{}' must be {}", at(path, n), key, what));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw InputError(
        fmt::format("{}: key '{}' must be {}, got '{}'", at(path, n), key, what, n.Scalar()));
  }
}

}  // namespace

SearchConfig parse_search_config(const YAML::Node& root, const std::string& path,
                                 bool caller_objective) {
  check_keys(root, path, "",
             {"study",
              "storage",
              "sampler",
              "pruner",
              "space",
              "fixed",
              "objective",
              "folds",
              "retries",
              "retry_failed",
              "heartbeat_s",
              "grace_s",
              "seed",
              "trials",
              "timeout_s",
              "trial_timeout_s",
              "kill_grace_s",
              "max_consecutive_failures",
              "failure_backoff_s",
              "trial_ranks",
              "trial_launcher",
              "fold_reports",
              "trials_per_device",
              "keep_trial_models"});
  SearchConfig c;
  c.path = path;
  const YAML::Node study = root["study"];
  if (!study) throw InputError(fmt::format("{}: missing key 'study' ({{name, direction}})", path));
  check_keys(study, path, "study", {"name", "direction", "metric"});
  if (!study["name"])
    throw InputError(fmt::format("{}: missing key 'study.name'", at(path, study)));
  c.study_name = get<std::string>(study["name"], path, "study.name", "a string");
  if (c.study_name.empty())
    throw InputError(fmt::format("{}: 'study.name' is empty", at(path, study["name"])));
  if (study["direction"])
    c.direction = parse_direction_name(
        get<std::string>(study["direction"], path, "study.direction", "minimize or maximize"),
        at(path, study["direction"]) + ": study.direction");
  if (study["metric"])
    c.metric = get<std::string>(study["metric"], path, "study.metric", "a string");

  if (root["storage"]) c.storage = get<std::string>(root["storage"], path, "storage", "a URL");
  if (root["sampler"]) {
    if (!root["sampler"].IsMap())
      throw InputError(fmt::format("{}: 'sampler' must be a mapping", at(path, root["sampler"])));
    c.sampler = root["sampler"];
  }
  if (root["pruner"]) {
    if (!root["pruner"].IsMap())
      throw InputError(fmt::format("{}: 'pruner' must be a mapping", at(path, root["pruner"])));
    c.pruner = root["pruner"];
  }
  if (!root["space"]) throw InputError(fmt::format("{}: missing key 'space'", path));
  if (!root["space"].IsMap())
    throw InputError(fmt::format("{}: 'space' must be a mapping", at(path, root["space"])));
  c.space = root["space"];
  if (const YAML::Node fixed = root["fixed"]) {
    if (!fixed.IsMap())
      throw InputError(fmt::format("{}: 'fixed' must be a mapping", at(path, fixed)));
    for (const auto& kv : fixed) {
      const std::string key = kv.first.as<std::string>();
      c.fixed[key] = get<std::string>(kv.second, path, "fixed." + key, "a scalar");
    }
  }

  const YAML::Node obj = root["objective"];
  if (caller_objective) {
    for (const char* key :
         {"objective", "folds", "trial_ranks", "trial_launcher", "fold_reports", "trials_per_device",
          "keep_trial_models"})
      if (root[key])
        throw InputError(fmt::format(
            "{}: key '{}' belongs to a config's own objective, but the caller gives the objective "
            "(a function: it runs its folds itself and reports them with report_fold); remove it",
            at(path, root[key]), key));
  } else if (!obj)
    throw InputError(fmt::format(
        "{}: missing key 'objective' ({{command: ...}} or {{train_config: ...}})", path));
  if (obj) check_keys(obj, path, "objective", {"command", "args", "train_config"});
  if (obj && obj["command"].IsDefined() == obj["train_config"].IsDefined())
    throw InputError(
        fmt::format("{}: 'objective' needs exactly one of 'command' or "
                    "'train_config'",
                    at(path, obj)));
  if (!obj) {
    // the caller's objective
  } else if (obj["command"]) {
    c.command = get<std::string>(obj["command"], path, "objective.command", "a string");
    if (obj["args"]) c.pass_args = get<bool>(obj["args"], path, "objective.args", "true or false");
  } else {
    if (obj["args"])
      throw InputError(
          fmt::format("{}: 'objective.args' applies to 'command' only", at(path, obj["args"])));
    std::filesystem::path p =
        get<std::string>(obj["train_config"], path, "objective.train_config", "a file name");
    if (p.is_relative()) p = std::filesystem::path(path).parent_path() / p;
    c.train_config = p.lexically_normal().string();
  }

  auto positive_int = [&](const char* key, int64_t& out, int64_t min) {
    if (!root[key]) return;
    out = get<int64_t>(root[key], path, key, "an integer");
    if (out < min)
      throw InputError(
          fmt::format("{}: key '{}' must be >= {}, got {}", at(path, root[key]), key, min, out));
  };
  auto positive_float = [&](const char* key, double& out) {
    if (!root[key]) return;
    out = get<double>(root[key], path, key, "a number");
    if (!(out > 0))
      throw InputError(
          fmt::format("{}: key '{}' must be > 0, got {}", at(path, root[key]), key, out));
  };
  positive_int("folds", c.folds, 1);
  positive_int("retries", c.retries, 0);
  positive_int("trials", c.trials, 1);
  positive_float("heartbeat_s", c.heartbeat_s);
  positive_float("grace_s", c.grace_s);
  positive_float("timeout_s", c.timeout_s);
  positive_float("trial_timeout_s", c.trial_timeout_s);
  positive_int("max_consecutive_failures", c.max_consecutive_failures, 0);
  positive_int("trial_ranks", c.trial_ranks, 1);
  positive_int("trials_per_device", c.trials_per_device, 1);
  if (c.trials_per_device > 1 && c.trial_ranks > 1)
    throw InputError(fmt::format(
        "{}: keys 'trials_per_device' ({}) and 'trial_ranks' ({}) exclude each other: a trial "
        "either shares a device with others or spans several",
        at(path, root["trials_per_device"]), c.trials_per_device, c.trial_ranks));
  if (root["trial_launcher"]) {
    c.trial_launcher = get<std::string>(root["trial_launcher"], path, "trial_launcher", "a string");
    if (c.trial_launcher.find("{ranks}") == std::string::npos)
      throw InputError(
          fmt::format("{}: key 'trial_launcher' must contain {{ranks}} (where the "
                      "rank count goes, e.g. 'mpirun -np {{ranks}}'), got '{}'",
                      at(path, root["trial_launcher"]), c.trial_launcher));
  }
  if (const YAML::Node n = root["fold_reports"]) {
    const std::string v = get<std::string>(n, path, "fold_reports", "evaluations or folds");
    if (v == "evaluations")
      c.fold_reports = FoldReports::Evaluations;
    else if (v == "folds")
      c.fold_reports = FoldReports::Folds;
    else
      throw InputError(fmt::format("{}: key 'fold_reports' must be evaluations or folds, got '{}'",
                                   at(path, n), v));
    if (!c.command.empty())
      throw InputError(fmt::format(
          "{}: key 'fold_reports' applies to a train_config objective (a command reports its "
          "folds itself)",
          at(path, n)));
  }
  if (c.trial_ranks > 1 && c.train_config.empty())
    throw InputError(
        fmt::format("{}: key 'trial_ranks' applies to a train_config objective (a "
                    "command objective starts its own processes)",
                    at(path, root["trial_ranks"])));
  auto non_negative_float = [&](const char* key, double& out) {
    if (!root[key]) return;
    out = get<double>(root[key], path, key, "a number");
    if (!(out >= 0))
      throw InputError(
          fmt::format("{}: key '{}' must be >= 0, got {}", at(path, root[key]), key, out));
  };
  non_negative_float("kill_grace_s", c.kill_grace_s);
  non_negative_float("failure_backoff_s", c.failure_backoff_s);
  if (root["keep_trial_models"])
    c.keep_trial_models =
        get<bool>(root["keep_trial_models"], path, "keep_trial_models", "true or false");
  if (root["retry_failed"])
    c.retry_failed = get<bool>(root["retry_failed"], path, "retry_failed", "true or false");
  if (root["seed"]) c.seed = get<uint64_t>(root["seed"], path, "seed", "a non-negative integer");
  if (c.grace_s <= c.heartbeat_s)
    throw InputError(fmt::format("{}: grace_s ({}) must be larger than heartbeat_s ({})", path,
                                 c.grace_s, c.heartbeat_s));
  if (!c.train_config.empty() && !c.metric.empty()) {
    // A train_config objective's metric has a known direction (train/score_task.h): loss, mse and
    // mae are minimised, every other metric maximised. Without study.direction it follows the
    // metric; a direction against it is refused (it would search for the worst model).
    std::string m = c.metric;
    for (const char* prefix : {"eval.", "validation."})
      if (m.rfind(prefix, 0) == 0) m = m.substr(std::string(prefix).size());
    const Direction natural = metric_maximized(m) ? Direction::Maximize : Direction::Minimize;
    if (!study["direction"])
      c.direction = natural;
    else if (c.direction != natural)
      throw InputError(fmt::format(
          "{}: study.direction is {} but study.metric {} is {} the better it is; set direction: "
          "{} (or leave it out)",
          at(path, study["direction"]), direction_name(c.direction), c.metric,
          natural == Direction::Maximize ? "higher" : "lower", direction_name(natural)));
  }
  return c;
}

SearchConfig load_search_config(const std::string& path, bool caller_objective) {
  if (!std::filesystem::is_regular_file(path))
    throw InputError(fmt::format("{}: cannot open the search config", path));
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.msg));
  }
  return parse_search_config(root, path, caller_objective);
}

}  // namespace ftune::hpo
