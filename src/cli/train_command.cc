// `ftune train --config FILE.yaml [section.key=value ...]`: fine-tune a classifier (see
// train/trainer.h). Overrides after the options replace keys of the YAML file.
#include "cli/commands.h"
#include "train/trainer.h"

namespace ftune::cli {

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("train", "Fine-tune a classifier from a YAML config");
  cmd->add_option("--config", *config, "YAML training configuration")->required();
  cmd->add_option("overrides", *overrides, "section.key=value overrides of the configuration");
  cmd->callback([config, overrides] { run_training(TrainConfig::load(*config, *overrides)); });
}

}  // namespace ftune::cli
