// The one table of training config keys: each key of `ftune train`'s YAML is declared once here
// (config_keys.cc) with its type, help and per-key validation; its default is the TrainConfig
// member's initializer, shown from a default-constructed TrainConfig. From the table come the
// schema TrainConfig::parse reads with, the unknown-key check and its "did you mean",
// `ftune config --keys` and docs/configuration.md (a test fails when the checked-in page differs
// from the table). Rules that relate several keys stay in one hand-written function
// (train_config.cc, check_rules). The `peft:` keys are declared by models/adapter_config.h and
// listed here with them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace ftune {

struct ConfigKey {
  std::string key;   // dotted: "training.learning_rate"
  std::string type;  // for people: "integer", "number in [0, 1)", "auto, on or off", ...
  std::string help;
  // Reads the value into the config (`where` names the key and its origin for messages); throws
  // InputError when it has the wrong type. Null for keys a section reader owns (peft).
  std::function<void(TrainConfig&, const YAML::Node&, const std::string& where)> read;
  // Per-key validation of the value read ("must be at least 1"); null: any value of the type.
  std::function<void(const TrainConfig&, const std::string& where)> check;
  // The default, as a user would write it ("" when there is none, e.g. a required path).
  std::function<std::string(const TrainConfig&)> show;
};

// Every key, in the order of the sections model, data, training, peft, eval, early_stopping,
// checkpoint, output (preset first).
const std::vector<ConfigKey>& config_keys();
// The key closest to `unknown` by edit distance (at most 3 edits), or "".
std::string closest_config_key(const std::string& unknown);

// `ftune config --keys`: one line per key (key, type, default) with its help below.
std::string config_keys_text();
// docs/configuration.md, generated: a table per section.
std::string config_keys_markdown();

}  // namespace ftune
