// Runs the trial command (trial_process.h: /bin/sh -c in its own process group, tied to the
// worker's life), parses its report lines, kills the group when a report says stop, and
// terminates it (SIGTERM, then SIGKILL after kill_grace_s) when the trial's time is up.
#include "hpo/command_objective.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <charconv>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hpo/interrupt.h"
#include "hpo/trial_process.h"

namespace ftune::hpo {

namespace {

// A JSON value for a param's text: numbers as numbers, anything else as a string.
nlohmann::json json_value(const std::string& text) {
  double d;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, d);
  if (ec == std::errc() && p == end && std::isfinite(d)) {
    if (text.find_first_of(".eE") == std::string::npos) return static_cast<int64_t>(d);
    return d;
  }
  if (text == "true") return true;
  if (text == "false") return false;
  return text;
}

double parse_number(const std::string& s, const std::string& line, int64_t number) {
  double v;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    if (s == "nan" || s == "NaN") return std::nan("");
    throw Error(
        fmt::format("trial {}: command printed '{}': '{}' is not a number", number, line, s));
  }
  return v;
}

int64_t parse_int(const std::string& s, const std::string& line, int64_t number) {
  int64_t v;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw Error(
        fmt::format("trial {}: command printed '{}': '{}' is not an integer", number, line, s));
  return v;
}

}  // namespace

std::string shell_quote(const std::string& text) {
  std::string out(1, '\'');
  for (char c : text) {
    if (c == '\'')
      out.append("'\\''");  // close, escaped quote, reopen
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

CommandObjective::CommandObjective(std::string command, std::map<std::string, std::string> fixed,
                                   bool pass_args, int folds, double kill_grace_s)
    : command_(std::move(command)),
      fixed_(std::move(fixed)),
      pass_args_(pass_args),
      folds_(folds),
      kill_grace_s_(kill_grace_s) {}

std::string CommandObjective::command_line(const Trial& trial, const SearchSpace& space) const {
  std::string cmd = command_;
  if (!pass_args_) return cmd;
  for (const auto& [name, value] : fixed_)
    cmd.append(" ").append(shell_quote(fmt::format("--{}={}", name, value)));
  for (const auto& [name, value] : trial.params)
    cmd.append(" ").append(shell_quote(fmt::format("--{}={}", name, space.external(name, value))));
  return cmd;
}

std::string CommandObjective::params_json(const Trial& trial, const SearchSpace& space) const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : fixed_) j[name] = json_value(value);
  for (const auto& [name, value] : trial.params) {
    const std::string text = space.external(name, value);
    const ParamSpec* p = space.find(name);
    j[name] = p && p->dist.kind == Distribution::Kind::Categorical ? nlohmann::json(text)
                                                                   : json_value(text);
  }
  return j.dump();
}

double CommandObjective::run(const Trial& trial, const SearchSpace& space,
                             TrialReporter& reporter) {
  TrialProcess command(command_line(trial, space),
                       {"FTUNE_TRIAL_PARAMS=" + params_json(trial, space),
                        "FTUNE_TRIAL_NUMBER=" + std::to_string(trial.number),
                        "FTUNE_FOLDS=" + std::to_string(folds_)},
                       kill_grace_s_);
  std::optional<double> value;
  std::map<int64_t, double> folds;
  std::string line;
  for (;;) {
    if (reporter.stop_requested()) {
      command.terminate();
      throw Error(fmt::format("trial {}: stopped: its time is up", trial.number));
    }
    const TrialProcess::Read r = command.read_line(line, 0.1);
    if (r == TrialProcess::Read::Timeout) continue;
    if (r == TrialProcess::Read::End) break;
    std::istringstream words(line);
    std::string kind, a, b, extra;
    words >> kind >> a >> b >> extra;
    bool stop = false;
    if (kind == "intermediate" || kind == "fold") {
      if (a.empty() || b.empty() || !extra.empty())
        throw Error(fmt::format("trial {}: command printed '{}', expected '{} {} VALUE'",
                                trial.number, line, kind, kind == "fold" ? "K" : "STEP"));
      const int64_t k = parse_int(a, line, trial.number);
      const double v = parse_number(b, line, trial.number);
      if (kind == "fold") {
        folds[k] = v;
        stop = reporter.report_fold(k, v);
      } else {
        stop = reporter.report(k, v);
      }
    } else if (kind == "value") {
      if (a.empty() || !b.empty())
        throw Error(
            fmt::format("trial {}: command printed '{}', expected 'value V'", trial.number, line));
      value = parse_number(a, line, trial.number);
    } else {
      spdlog::debug("trial {}: {}", trial.number, line);
    }
    if (stop) {
      command.kill();
      throw TrialPruned();
    }
  }
  const int status = command.wait();
  if (interrupted()) throw Error(fmt::format("trial {}: interrupted", trial.number));
  if (WIFSIGNALED(status))
    throw Error(
        fmt::format("trial {}: command killed by signal {}", trial.number, WTERMSIG(status)));
  if (WEXITSTATUS(status) != 0)
    throw Error(
        fmt::format("trial {}: command exited with status {}", trial.number, WEXITSTATUS(status)));
  if (value) return *value;
  if (folds.empty())
    throw Error(fmt::format("trial {}: command printed no 'value V' line (nor any 'fold K V')",
                            trial.number));
  double sum = 0;
  for (const auto& [k, v] : folds) sum += v;
  return sum / static_cast<double>(folds.size());
}

}  // namespace ftune::hpo
