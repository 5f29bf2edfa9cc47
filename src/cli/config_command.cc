// `ftune config --keys [--markdown]`: every training config key with its type, default and help,
// from the key table (train/config_keys.h; --markdown writes docs/configuration.md).
// `ftune config --config FILE.yaml [section.key=value ...]`: the configuration as a run would
// resolve it (preset and overrides applied, every key checked), as YAML on stdout.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "train/config_keys.h"
#include "train/train_config.h"

namespace ftune::cli {

void add_config_command(CLI::App& app) {
  struct ConfigArgs {
    bool keys = false, markdown = false;
    std::string config;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* cmd = app.add_subcommand(
      "config", "List the training config keys (--keys), or check and print a resolved config");
  cmd->add_flag("--keys", args->keys, "every key with its type, default and help");
  cmd->add_flag("--markdown", args->markdown, "with --keys: as docs/configuration.md");
  cmd->add_option("--config", args->config, "a YAML training configuration to check and resolve");
  cmd->add_option("overrides", args->overrides, "section.key=value overrides of the configuration");
  cmd->callback([args] {
    if (args->keys == !args->config.empty())
      throw InputError("ftune config needs either --keys or --config FILE.yaml");
    if (args->markdown && !args->keys) throw InputError("--markdown goes with --keys");
    if (args->keys) {
      if (!args->overrides.empty())
        throw InputError("ftune config --keys takes no overrides (they go with --config)");
      std::cout << (args->markdown ? config_keys_markdown() : config_keys_text());
      return;
    }
    const TrainConfig c = TrainConfig::load(args->config, args->overrides);
    YAML::Emitter out;
    out << c.resolved;
    std::cout << out.c_str() << "\n";
  });
}

}  // namespace ftune::cli
