// Entry point of the `ftune` command: parses the verb, runs it, and maps errors to exit codes
// (0 success, 1 usage, 2 bad input or failure).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
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
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ftune::Interrupted& e) {
    std::fprintf(stderr, "ftune: %s\n", e.what());
    return 128 + e.signal();
  } catch (const ftune::Error& e) {
    std::fprintf(stderr, "ftune: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ftune: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
