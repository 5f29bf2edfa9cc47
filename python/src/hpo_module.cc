// ftune._ftune's search part: one worker of a study (hpo/study_worker.h) run from Python, with the
// config's own objective or a Python function as the objective. The function gets a Trial (its
// number, its params as values (the config's `fixed` ones too), report / report_fold that say when
// to stop, set_attr) and returns the trial's value; raising ftune.hpo.TrialPruned ends it PRUNED,
// any other exception FAILED with the exception's text. The worker runs with the GIL released (its
// heartbeat thread needs none); the function is called with the GIL held. Ctrl-C during the study
// fails the trial in flight as `ftune hpo run` does, starts no further trial, and raises
// KeyboardInterrupt when the worker ends.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <yaml-cpp/yaml.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "dist/process_group.h"
#include "hpo/interrupt.h"
#include "hpo/objective.h"
#include "hpo/search_config.h"
#include "hpo/search_space.h"
#include "hpo/study_worker.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::object json_loads(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

// What the Python function holds of its trial. The reporter lives only while the objective runs:
// a trial kept past its end refuses reports.
struct TrialState {
  ftune::hpo::TrialReporter* reporter = nullptr;
};

class PyTrial {
 public:
  PyTrial(int64_t number, nb::dict params, std::shared_ptr<TrialState> state)
      : number(number), params(std::move(params)), state_(std::move(state)) {}

  bool report(int64_t step, double value) {
    return reporter().report(step, value) || ftune::hpo::interrupted();
  }
  bool report_fold(int64_t fold, double value) {
    return reporter().report_fold(fold, value) || ftune::hpo::interrupted();
  }
  bool should_stop() { return reporter().stop_requested() || ftune::hpo::interrupted(); }
  void set_attr(const std::string& key, nb::handle value) {
    const std::string text =
        nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(value));
    reporter().set_attr(key, nlohmann::json::parse(text));
  }

  int64_t number;
  nb::dict params;

 private:
  ftune::hpo::TrialReporter& reporter() {
    if (!state_->reporter)
      throw ftune::InputError(fmt::format("trial {} has ended: it takes no more reports", number));
    return *state_->reporter;
  }
  std::shared_ptr<TrialState> state_;
};

// A search-space value as Python sees it: a number or a choice's own value (JSON), else its text.
nb::object param_value(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && (j.is_number() || j.is_boolean())) return json_loads(text);
  return nb::str(text.c_str());
}

class PyObjective : public ftune::hpo::Objective {
 public:
  PyObjective(nb::object fn, nb::object pruned, std::map<std::string, std::string> fixed)
      : fn_(std::move(fn)), pruned_(std::move(pruned)), fixed_(std::move(fixed)) {}

  double run(const ftune::hpo::Trial& trial, const ftune::hpo::SearchSpace& space,
             ftune::hpo::TrialReporter& reporter) override {
    nb::gil_scoped_acquire gil;
    auto state = std::make_shared<TrialState>();
    state->reporter = &reporter;
    nb::dict params;  // the config's `fixed` values, then the sampled ones
    for (const auto& [name, text] : fixed_) params[name.c_str()] = param_value(text);
    for (const auto& [name, internal] : trial.params)
      params[name.c_str()] = param_value(space.external(name, internal));
    nb::object py_trial = nb::cast(PyTrial(trial.number, params, state));
    // Ctrl-C while the function ran fails its trial "interrupted", however it ended (as `ftune hpo
    // run` fails the trial in flight).
    const auto interrupted = [] {
      return std::runtime_error("interrupted: Ctrl-C or SIGTERM stopped the study");
    };
    try {
      nb::object value = fn_(py_trial);
      state->reporter = nullptr;
      if (ftune::hpo::interrupted()) throw interrupted();
      if (!nb::isinstance<nb::float_>(value) && !nb::isinstance<nb::int_>(value))
        throw std::runtime_error(fmt::format("the objective returned a {}, not a number",
                                             nb::type_name(value.type()).c_str()));
      return nb::cast<double>(value);
    } catch (nb::python_error& e) {
      state->reporter = nullptr;
      if (e.matches(PyExc_KeyboardInterrupt)) ftune::hpo::mark_interrupted();
      if (ftune::hpo::interrupted()) throw interrupted();
      if (e.matches(pruned_)) throw ftune::hpo::TrialPruned();
      throw std::runtime_error(e.what());
    }
  }

 private:
  nb::object fn_, pruned_;
  std::map<std::string, std::string> fixed_;
};

// hpo_run(config, is_path, objective, trial_pruned, trials, timeout_s, storage, study) -> the
// outcome as JSON text.
std::string hpo_run(const std::string& config, bool is_path, nb::object objective,
                    nb::object trial_pruned, int64_t trials, double timeout_s,
                    const std::string& storage, const std::string& study) {
  const bool caller = !objective.is_none();
  ftune::hpo::SearchConfig c =
      is_path ? ftune::hpo::load_search_config(config, caller)
              : ftune::hpo::parse_search_config(YAML::Load(config), "the search dict", caller);
  if (trials > 0) c.trials = trials;
  if (timeout_s > 0) c.timeout_s = timeout_s;
  if (!storage.empty()) c.storage = storage;
  if (!study.empty()) c.study_name = study;
  ftune::ProcessGroup::stand_alone();
  std::unique_ptr<ftune::hpo::Objective> own;
  if (caller)
    own = std::make_unique<PyObjective>(objective, trial_pruned, c.fixed);
  else
    own = ftune::hpo::config_objective(c);
  ftune::hpo::StudyOutcome out;
  {
    nb::gil_scoped_release release;
    ftune::hpo::InterruptScope interrupts;  // Python's own handlers are back when it ends
    out = ftune::hpo::run_study_worker(c, *own);
  }
  if (out.interrupted)
    throw ftune::Interrupted(
        "interrupted: the trial in flight was failed, no further trial was "
        "started",
        0);
  if (!out.worker.gave_up.empty())
    throw ftune::Error(fmt::format("the worker stopped: {}", out.worker.gave_up));
  nlohmann::json j{{"study", out.study.name},
                   {"direction", ftune::hpo::direction_name(c.direction)},
                   {"worker",
                    {{"complete", out.worker.complete},
                     {"pruned", out.worker.pruned},
                     {"failed", out.worker.failed}}},
                   {"study_counts",
                    {{"running", out.counts[1]},
                     {"complete", out.counts[2]},
                     {"pruned", out.counts[3]},
                     {"failed", out.counts[4]}}}};
  const auto space = ftune::hpo::SearchSpace::parse(c.space, c.path + ": space");
  auto params_of = [&](const ftune::hpo::Trial& t) {
    nlohmann::json params = nlohmann::json::object();
    for (const auto& [name, internal] : t.params) params[name] = space.external(name, internal);
    return params;
  };
  if (out.best)
    j["best"] = {{"number", out.best->number},
                 {"value", *out.best->value},
                 {"params", params_of(*out.best)}};
  j["trials"] = nlohmann::json::array();
  for (const ftune::hpo::Trial& t : out.trials)
    j["trials"].push_back({{"number", t.number},
                           {"state", ftune::hpo::to_string(t.state)},
                           {"value", t.value ? nlohmann::json(*t.value) : nlohmann::json()},
                           {"params", params_of(t)},
                           {"error", t.error}});
  return j.dump();
}

}  // namespace

void bind_hpo(nb::module_& m) {
  nb::class_<PyTrial>(m, "Trial")
      .def_ro("number", &PyTrial::number)
      .def_ro("params", &PyTrial::params)
      .def("report", &PyTrial::report, "step"_a, "value"_a,
           "Stores an intermediate value; True when the trial should stop now (pruned)")
      .def("report_fold", &PyTrial::report_fold, "fold"_a, "value"_a,
           "Stores a fold's final value (the mean so far is reported); True: stop now")
      .def("should_stop", &PyTrial::should_stop,
           "True once the trial ran past trial_timeout_s or the study was interrupted")
      .def("set_attr", &PyTrial::set_attr, "key"_a, "value"_a,
           "Records a JSON value as an attribute of the trial in the study");
  m.def("hpo_run", &hpo_run, "config"_a, "is_path"_a, "objective"_a.none(), "trial_pruned"_a,
        "trials"_a, "timeout_s"_a, "storage"_a, "study"_a);
}
