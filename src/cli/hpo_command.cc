// `ftune hpo`: hyperparameter search.
//
//   ftune hpo run --config search.yaml [--study NAME] [--storage URL] [--trials N] [--timeout S]
//   ftune hpo status (--config search.yaml | --storage URL) [--study NAME]
//   ftune hpo best   (--config search.yaml | --storage URL) [--study NAME] [--json]
//   ftune hpo export (--config search.yaml | --storage URL) [--study NAME] --format json|csv
//                    --output FILE
//
// `run` is one worker: start it as many times as you like, on one machine (SQLite) or many
// (PostgreSQL), with the same config; they share the study. --trials counts trials study-wide.
// The objective's configuration is checked before the first trial. Bad input (config,
// unreachable storage, a study created with another space) exits with 2, and so does a worker
// whose trials failed (it says how many, or why it gave up). status, best and export read an
// existing storage only: they never create one.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "dist/process_group.h"
#include "hpo/interrupt.h"
#include "hpo/search_config.h"
#include "hpo/search_space.h"
#include "hpo/storage.h"
#include "hpo/study_report.h"
#include "hpo/study_worker.h"
#include "hpo/worker_group.h"
#include "io/atomic_file.h"
#include "io/path_guard.h"
#include "train/train_config.h"

namespace ftune::cli {

namespace {

// Seconds since the epoch, as the storages stamp trial times (a running trial's cost so far).
double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct HpoArgs {
  std::string config, study, storage, format, output;
  std::string device;       // hpo run --device: every trial's training.device
  int64_t trial_ranks = 0;  // hpo run --trial-ranks (0: the config's trial_ranks)
  int64_t trials = -1;
  double timeout_s = 0;
  bool trials_given = false, timeout_given = false;
  bool json = false;
};

// This executable's command line as it was started (/proc/self/cmdline), for the workers that
// `trials_per_device` starts.
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  if (argv.empty()) throw Error("cannot read /proc/self/cmdline to start the search's workers");
  return argv;
}

// The device the search's trials train on (the training config's training.device with the
// search's fixed values; a space that varies it is not looked at).
std::string trial_device(const hpo::SearchConfig& c) {
  if (c.train_config.empty()) return "cpu";  // a command objective: its own business
  std::vector<std::string> fixed;
  for (const auto& [k, v] : c.fixed) fixed.push_back(k + "=" + v);
  return TrainConfig::load(c.train_config, fixed, "search file's fixed values").training.device;
}

// --device: cpu, cuda:K, or cuda = the GPU of this worker's local rank when a launcher started
// several workers (each takes its own), else GPU 0. Data-parallel trials take their ranks'.
std::string worker_device(const std::string& device) {
  parse_device(device);  // cpu, cuda or cuda:N, else InputError
  if (device != "cuda") return device;
  const RankInfo info = launcher_rank_info();
  if (!info.launched || info.size == 1) return device;
  if (info.local_rank < 0)
    throw InputError(
        fmt::format("--device cuda: the launcher did not say this worker's local "
                    "rank (worker {} of {}); pass --device cuda:K",
                    info.rank, info.size));
  spdlog::info("worker {} of {} on this machine's GPU {}", info.rank, info.size, info.local_rank);
  return fmt::format("cuda:{}", info.local_rank);
}

void run_search(const HpoArgs& a) {
  hpo::SearchConfig c = hpo::load_search_config(a.config);
  if (!a.study.empty()) c.study_name = a.study;
  if (!a.storage.empty()) c.storage = a.storage;
  if (a.trials_given) {
    if (a.trials < 1)
      throw InputError(fmt::format("--trials must be at least 1, got {}", a.trials));
    c.trials = a.trials;
  }
  if (a.timeout_given) {
    if (!(a.timeout_s > 0))
      throw InputError(
          fmt::format("--timeout must be a positive number of seconds, got {}", a.timeout_s));
    c.timeout_s = a.timeout_s;
  }
  if (c.storage.empty())
    throw InputError(fmt::format("{}: no storage: set 'storage:' or pass --storage URL", c.path));
  if (a.trial_ranks > 0) c.trial_ranks = a.trial_ranks;
  if (c.trial_ranks > 1 && c.train_config.empty())
    throw InputError(
        "--trial-ranks applies to a train_config objective (a command objective "
        "starts its own processes)");
  // Workers that a launcher started side by side (`srun -n 8 ftune hpo run`, `mpirun -np 8 ...`)
  // are independent: their in-process trials never join MPI as ranks of one run.
  ProcessGroup::stand_alone();
  if (!a.device.empty()) {  // this worker's device for every trial (one GPU per worker)
    c.fixed["training.device"] = worker_device(a.device);
  }
  // trials_per_device: this process starts the workers and waits for them (worker_group.h).
  const std::optional<hpo::WorkerSlot> slot = hpo::worker_slot_from_env();
  if (c.trials_per_device > 1 && !slot) {
    const bool cpu = trial_device(c) == "cpu";
    spdlog::info("{} workers side by side on {}", c.trials_per_device,
                 cpu ? "core subsets of this CPU" : "one device, each with its share of memory");
    const int code =
        hpo::run_worker_group(own_command_line(), static_cast<int>(c.trials_per_device), cpu);
    if (code > 128)
      throw Interrupted(fmt::format("interrupted: the search's workers stopped (signal {})",
                                    code - 128),
                        code - 128);
    if (code != 0)
      throw Error(fmt::format("a search worker exited with {} (its messages are above)", code));
    return;
  }
  if (slot && slot->count > 1 && !c.train_config.empty() && trial_device(c) != "cpu" &&
      !c.fixed.count("training.memory_fraction")) {
    // Each of the device's workers plans with its share of the memory.
    std::vector<std::string> fixed;
    for (const auto& [k, v] : c.fixed) fixed.push_back(k + "=" + v);
    const double share =
        TrainConfig::load(c.train_config, fixed, "search file's fixed values").training.memory_fraction;
    c.fixed["training.memory_fraction"] = fmt::format("{}", share / slot->count);
  }
  auto objective = hpo::config_objective(c);
  hpo::install_interrupt_handlers();
  const hpo::StudyOutcome outcome = hpo::run_study_worker(c, *objective);
  const hpo::WorkerStats& s = outcome.worker;
  const hpo::StudyInfo& study = outcome.study;
  const auto& counts = outcome.counts;
  const std::string discarded =
      s.discarded ? fmt::format(", {} discarded: failed as stale meanwhile", s.discarded) : "";
  std::printf(
      "worker: %lld trials (%lld complete, %lld pruned, %lld failed%s); study '%s': %lld "
      "complete, %lld pruned, %lld failed, %lld running\n",
      static_cast<long long>(s.total()), static_cast<long long>(s.complete),
      static_cast<long long>(s.pruned), static_cast<long long>(s.failed), discarded.c_str(),
      study.name.c_str(), static_cast<long long>(counts[2]), static_cast<long long>(counts[3]),
      static_cast<long long>(counts[4]), static_cast<long long>(counts[1]));
  if (outcome.interrupted)
    throw Error("interrupted: the trial in flight was failed, no further trial was started");
  if (!s.gave_up.empty()) throw Error(fmt::format("this worker stopped: {}", s.gave_up));
  if (s.failed > 0)
    throw Error(fmt::format("{} of this worker's {} trials failed (`ftune hpo status` shows why)",
                            s.failed, s.total()));
}

struct OpenStudy {
  std::unique_ptr<hpo::Storage> storage;
  hpo::StudyInfo study;
};

// The study named by --study / the config; the only study of the storage when none is named.
OpenStudy open_study(const HpoArgs& a) {
  std::string url = a.storage, name = a.study;
  if (!a.config.empty()) {
    const hpo::SearchConfig c = hpo::load_search_config(a.config);
    if (url.empty()) url = c.storage;
    if (name.empty()) name = c.study_name;
  }
  if (url.empty()) throw InputError("no storage: pass --storage URL or --config search.yaml");
  OpenStudy o{hpo::open_storage(url, hpo::StorageAccess::reader()), {}};
  if (name.empty()) {
    auto all = o.storage->studies();
    if (all.size() != 1)
      throw InputError(fmt::format("{} holds {} studies; name one with --study", url, all.size()));
    o.study = all[0];
    return o;
  }
  auto s = o.storage->find_study(name);
  if (!s) throw InputError(fmt::format("{}: no study named '{}'", o.storage->describe(), name));
  o.study = *s;
  return o;
}

}  // namespace

void add_hpo_command(CLI::App& app) {
  CLI::App* hpo = app.add_subcommand("hpo", "Hyperparameter search with pruning over k folds");
  hpo->require_subcommand(1);
  auto args = std::make_shared<HpoArgs>();
  auto study_options = [&](CLI::App* cmd) {
    cmd->add_option("--config", args->config, "Search configuration (YAML)");
    cmd->add_option("--study", args->study, "Study name (default: the config's)");
    cmd->add_option("--storage", args->storage, "sqlite:///FILE.db or postgresql://USER@HOST/DB");
  };

  CLI::App* run = hpo->add_subcommand("run", "Run one search worker (start several in parallel)");
  study_options(run);
  run->get_option("--config")->required();
  CLI::Option* trials =
      run->add_option("--trials", args->trials, "Stop when this many trials of the study are done");
  CLI::Option* timeout =
      run->add_option("--timeout", args->timeout_s, "Start no trial after this many seconds");
  run->add_option("--device", args->device,
                  "Train every trial of this worker on this device (cpu, cuda:K; cuda: the local "
                  "rank's GPU when a launcher started the workers): several workers on one "
                  "machine each take their own GPU");
  run->add_option("--trial-ranks", args->trial_ranks,
                  "Run each trial as a data-parallel run of this many ranks (the config's "
                  "trial_launcher starts them; default: the config's trial_ranks, 1)")
      ->check(CLI::PositiveNumber);
  run->callback([args, trials, timeout] {
    args->trials_given = trials->count() > 0;
    args->timeout_given = timeout->count() > 0;
    run_search(*args);
  });

  CLI::App* status = hpo->add_subcommand("status", "Print the study's trials as a table");
  study_options(status);
  status->callback([args] {
    OpenStudy o = open_study(*args);
    const auto space = hpo::SearchSpace::from_json(o.study.space, o.storage->describe());
    std::fputs(
        hpo::status_table(o.study, space, o.storage->trials(o.study.id), epoch_now()).c_str(),
        stdout);
  });

  CLI::App* best = hpo->add_subcommand("best", "Print the best complete trial");
  study_options(best);
  best->add_flag("--json", args->json, "As JSON");
  best->callback([args] {
    OpenStudy o = open_study(*args);
    const auto space = hpo::SearchSpace::from_json(o.study.space, o.storage->describe());
    auto t = hpo::best_complete_trial(o.storage->trials(o.study.id), o.study.direction);
    if (!t) throw InputError(fmt::format("study '{}' has no complete trial yet", o.study.name));
    if (args->json) {
      std::printf("%s\n", hpo::trials_json(o.study, space, {*t})["trials"][0].dump(2).c_str());
      return;
    }
    std::printf("trial %lld: value %s\n", static_cast<long long>(t->number),
                fmt::format("{}", *t->value).c_str());
    for (const auto& [n, v] : t->params)
      std::printf("  %s: %s\n", n.c_str(), space.external(n, v).c_str());
  });

  CLI::App* exp = hpo->add_subcommand("export", "Write every trial as JSON or CSV");
  study_options(exp);
  exp->add_option("--format", args->format, "json or csv")
      ->required()
      ->check(CLI::IsMember({"json", "csv"}));
  exp->add_option("--output", args->output, "Output file (written atomically)")->required();
  exp->callback([args] {
    OpenStudy o = open_study(*args);
    const auto space = hpo::SearchSpace::from_json(o.study.space, o.storage->describe());
    const auto trials = o.storage->trials(o.study.id);
    const std::string text =
        args->format == "csv"
            ? hpo::trials_csv(space, trials)
            : hpo::trials_json(o.study, space, trials, epoch_now()).dump(2) + "\n";
    // Never over the study it reads (--output study.db).
    io::refuse_output_over_inputs({"--output", args->output},
                                  {{"the study storage", hpo::storage_file(o.storage->describe())}},
                                  false);
    io::write_file_atomic(args->output, text);
    std::printf("%zu trials written to %s\n", trials.size(), args->output.c_str());
  });
}

}  // namespace ftune::cli
