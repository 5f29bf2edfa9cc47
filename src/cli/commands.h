// Each `ftune <verb>` lives in its own file and registers itself on the CLI11 app here. A command
// callback throws ftune::Error on bad input; main() turns that into a message and exit code 2.
#pragma once

#include <CLI/CLI.hpp>

namespace ftune::cli {

void add_predict_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_hpo_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_dashboard_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_config_command(CLI::App& app);

}  // namespace ftune::cli
