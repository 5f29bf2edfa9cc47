// Runs the trial command (fork + /bin/sh -c in its own process group), parses its report lines,
// and kills the group when a report says stop.
#include "hpo/command_objective.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hpo/interrupt.h"

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

// Kills the command's whole process group (the shell and what it started) and reaps the shell.
void kill_group(pid_t pid) {
  set_running_command(0);
  kill(-pid, SIGKILL);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
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
                                   bool pass_args, int folds)
    : command_(std::move(command)),
      fixed_(std::move(fixed)),
      pass_args_(pass_args),
      folds_(folds) {}

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
  const std::string cmd = command_line(trial, space);
  const std::string params = params_json(trial, space);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    throw Error(fmt::format("trial {}: pipe: {}", trial.number, std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("trial {}: fork: {}", trial.number, std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a prune kills everything it started
    // A worker killed with -9 takes the shell along; what the shell started ends on its next
    // write to the closed pipe (SIGPIPE).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(out[1], STDOUT_FILENO);
    setenv("FTUNE_TRIAL_PARAMS", params.c_str(), 1);
    setenv("FTUNE_TRIAL_NUMBER", std::to_string(trial.number).c_str(), 1);
    setenv("FTUNE_FOLDS", std::to_string(folds_).c_str(), 1);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  set_running_command(pid);
  close(out[1]);
  FILE* in = fdopen(out[0], "r");
  std::optional<double> value;
  std::map<int64_t, double> folds;
  char* buf = nullptr;
  size_t cap = 0;
  try {
    ssize_t n;
    while ((n = getline(&buf, &cap, in)) > 0) {
      std::string line(buf, n);
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
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
          throw Error(fmt::format("trial {}: command printed '{}', expected 'value V'",
                                  trial.number, line));
        value = parse_number(a, line, trial.number);
      } else {
        spdlog::debug("trial {}: {}", trial.number, line);
      }
      if (stop) {
        kill_group(pid);
        fclose(in);
        free(buf);
        throw TrialPruned();
      }
    }
  } catch (const TrialPruned&) {
    throw;
  } catch (...) {
    kill_group(pid);
    fclose(in);
    free(buf);
    throw;
  }
  fclose(in);
  free(buf);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  set_running_command(0);
  kill(-pid, SIGKILL);  // anything the command left running in its group
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
