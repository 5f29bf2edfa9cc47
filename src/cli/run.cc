// The `ftune` command: parses the verb, runs it, and maps errors to exit codes (0 success; 2 bad
// input, a usage error or a failure; 128 + N after signal N). Log lines go to stderr, so stdout
// holds only a command's result (`ftune plan --json`, `ftune eval`). Here rather than in main.cc so
// that CLI11 is compiled once, with the commands (CMakeLists.txt: cli_commands).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "cli/run.h"
#include "core/error.h"
#include "dist/process_group.h"

namespace {

// CLI11 reports a verb it does not know, or a missing one, as "A subcommand is required" (or as
// an unexpected argument one level down): name it and list the verbs instead. Returns the
// message, or "" when the command line's verbs are known and complete.
std::string unknown_verb(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = "ftune";
  for (int i = 1; i < argc; ++i) {
    const std::vector<CLI::App*> subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty() || argv[i][0] == '-') return "";
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* s : subs) {
      names += (names.empty() ? "" : ", ") + s->get_name();
      if (s->get_name() == argv[i]) next = s;
    }
    if (!next) return "unknown command '" + path + " " + argv[i] + "'; the commands are: " + names;
    cur = next;
    path += " " + cur->get_name();
  }
  if (cur->get_require_subcommand_min() == 0) return "";
  std::string names;
  for (CLI::App* s : cur->get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + s->get_name();
  return "'" + path + "' needs a command: " + names;
}

// A command's failure: the message (with the rank, in a data-parallel run) and the exit status.
// A rank that fails stops every rank (MPI_Abort), so none waits for it in a collective.
int fail(int code, const char* what, const char* text) {
  const std::string rank = ftune::rank_prefix();
  std::fprintf(stderr, "ftune: %s%s%s\n", rank.c_str(), what, text);
  if (ftune::ProcessGroup::started() && ftune::ProcessGroup::world().distributed()) {
    std::fflush(stderr);
    ftune::ProcessGroup::world().abort(code);
  }
  return code;
}

}  // namespace

int ftune::cli::run(int argc, char** argv) {
  CLI::App app{"ftune: fine-tune transformer classifiers and search their hyperparameters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ftune 0.1.0");
  ftune::cli::add_predict_command(app);
  ftune::cli::add_doctor_command(app);
  ftune::cli::add_tokenize_command(app);
  ftune::cli::add_train_command(app);
  ftune::cli::add_eval_command(app);
  ftune::cli::add_hpo_command(app);
  ftune::cli::add_export_command(app);
  ftune::cli::add_plan_command(app);
  ftune::cli::add_report_command(app);
  ftune::cli::add_dashboard_command(app);
  ftune::cli::add_bench_command(app);
  ftune::cli::add_config_command(app);
  spdlog::set_default_logger(spdlog::stderr_color_mt("ftune"));
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  try {
    if (const std::string verb = unknown_verb(app, argc, argv); !verb.empty()) {
      std::fprintf(stderr, "ftune: error: %s (ftune --help describes them)\n", verb.c_str());
      return 2;
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "ftune: error: %s (--help shows the usage)\n", e.what());
    return 2;
  } catch (const ftune::Interrupted& e) {
    // Every rank stops at the same step (train/trainer.cc) and ends normally.
    std::fprintf(stderr, "ftune: %s%s\n", ftune::rank_prefix().c_str(), e.what());
    ftune::ProcessGroup::finalize();
    return 128 + e.signal();
  } catch (const ftune::RanksStopped& e) {
    // Every rank raised it together (they agreed on a failed step): each says why and ends
    // normally, so no rank's message is lost to another's MPI_Abort.
    std::fprintf(stderr, "ftune: %serror: %s\n", ftune::rank_prefix().c_str(), e.what());
    ftune::ProcessGroup::finalize();
    return 2;
  } catch (const ftune::Error& e) {
    return fail(2, "error: ", e.what());
  } catch (const std::exception& e) {
    return fail(2, "unexpected error: ", e.what());
  }
  ftune::ProcessGroup::finalize();
  return 0;
}
