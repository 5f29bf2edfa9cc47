// `ftune train --config FILE.yaml [--resume] [section.key=value ...]`: fine-tune a classifier (see
// train/trainer.h). Overrides after the options replace keys of the YAML file; --resume continues
// the run in output.dir from its last checkpoint.
#include "cli/commands.h"
#include "train/trainer.h"

namespace ftune::cli {

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto resume = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("train", "Fine-tune a classifier from a YAML config");
  cmd->add_option("--config", *config, "YAML training configuration")->required();
  cmd->add_flag("--resume", *resume,
                "Continue the run in output.dir from its last checkpoint (bit-exact on CPU)");
  cmd->add_option("overrides", *overrides, "section.key=value overrides of the configuration");
  cmd->callback([config, overrides, resume] {
    TrainOptions options;
    options.resume = *resume;
    run_training(TrainConfig::load(*config, *overrides), options);
  });
}

}  // namespace ftune::cli
