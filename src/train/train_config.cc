// Typed YAML configuration with unknown-key detection (see train_config.h).
#include "train/train_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/error.h"
#include "train/config_keys.h"
#include "train/presets.h"

namespace ftune {
namespace {

// Collects every leaf key path of a YAML mapping ("a.b.c"); a key given twice in one mapping is
// an error (YAML parsers silently keep one of them).
void leaf_keys(const YAML::Node& n, const std::string& prefix, std::vector<std::string>& out,
               const std::string& name) {
  if (!n.IsMap()) {
    out.push_back(prefix);
    return;
  }
  std::set<std::string> seen;
  for (const auto& kv : n) {
    const std::string key =
        prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>();
    if (!seen.insert(key).second)
      throw InputError(
          fmt::format("{}:{}: key '{}' is given twice", name, kv.first.Mark().line + 1, key));
    leaf_keys(kv.second, key, out, name);
  }
}

YAML::Node find(const YAML::Node& root, const std::string& dotted) {
  YAML::Node n = YAML::Clone(root);
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string part =
        dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!n.IsMap() || !n[part]) return YAML::Node(YAML::NodeType::Undefined);
    n = n[part];
    if (dot == std::string::npos) return n;
    start = dot + 1;
  }
}

void set_dotted(YAML::Node root, const std::string& dotted, const YAML::Node& value) {
  const size_t dot = dotted.find('.');
  if (dot == std::string::npos) {
    root[dotted] = value;
    return;
  }
  YAML::Node child = root[dotted.substr(0, dot)];
  if (!child.IsMap()) {
    child = YAML::Node(YAML::NodeType::Map);
    root[dotted.substr(0, dot)] = child;
  }
  set_dotted(child, dotted.substr(dot + 1), value);
}

}  // namespace

KeyOrigin::KeyOrigin(std::string file, std::vector<std::string> overrides, std::string label)
    : file_(std::move(file)), overrides_(std::move(overrides)), label_(std::move(label)) {}

std::string KeyOrigin::of(const std::string& key) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    const std::string set = it->substr(0, it->find('='));
    if (key == set || key.rfind(set + ".", 0) == 0 || set.rfind(key + ".", 0) == 0)
      return fmt::format("{} '{}'", label_, *it);
  }
  return file_;
}

std::string KeyOrigin::key(const std::string& key) const {
  return fmt::format("{}: key '{}'", of(key), key);
}

namespace {

// Checks the batch keys and fills in the derived ones (train_config.h, Training).
void resolve_batch_sizes(TrainConfig::Training& t, const YAML::Node& root,
                         const KeyOrigin& origin) {
  auto given = [&](const char* key) {
    const YAML::Node n = find(root, std::string("training.") + key);
    return n.IsDefined() && !n.IsNull();
  };
  auto fail = [&](const char* key, const std::string& what) {
    throw InputError(fmt::format("{} {}", origin.key(std::string("training.") + key), what));
  };
  const YAML::Node bs = find(root, "training.batch_size");
  const bool auto_batch = !given("batch_size") || (bs.IsScalar() && bs.Scalar() == "auto");
  if (!auto_batch && t.batch_size < 1) fail("batch_size", "must be at least 1 or auto");
  if (given("gradient_accumulation") && t.gradient_accumulation < 1)
    fail("gradient_accumulation", "must be at least 1");
  if (given("effective_batch_size") && t.effective_batch_size < 1)
    fail("effective_batch_size", "must be at least 1");
  if (auto_batch) {
    if (given("gradient_accumulation"))
      fail("gradient_accumulation",
           "is chosen by the memory planner when training.batch_size is auto; set "
           "training.effective_batch_size instead (or a fixed training.batch_size)");
    if (!given("effective_batch_size")) t.effective_batch_size = 32;
    t.gradient_accumulation = 0;
    return;
  }
  if (given("effective_batch_size")) {
    if (given("gradient_accumulation") &&
        t.batch_size * t.gradient_accumulation != t.effective_batch_size)
      fail("effective_batch_size",
           fmt::format("is {} but training.batch_size x training.gradient_accumulation = {} x {} "
                       "= {}; give two of the three",
                       t.effective_batch_size, t.batch_size, t.gradient_accumulation,
                       t.batch_size * t.gradient_accumulation));
    if (t.effective_batch_size % t.batch_size != 0)
      fail("effective_batch_size",
           fmt::format("({}) must be a multiple of training.batch_size ({})",
                       t.effective_batch_size, t.batch_size));
    t.gradient_accumulation = t.effective_batch_size / t.batch_size;
  } else {
    if (!given("gradient_accumulation")) t.gradient_accumulation = 1;
    t.effective_batch_size = t.batch_size * t.gradient_accumulation;
  }
}

// The rules that tie keys together (each key's own rule is in its row of the key table).
void check_rules(TrainConfig& c, const YAML::Node& root, const KeyOrigin& origin) {
  auto require = [&](bool ok, const std::string& key, const std::string& what) {
    if (!ok) throw InputError(fmt::format("{} {}", origin.key(key), what));
  };
  const auto& d = c.data;
  const auto& t = c.training;
  require(!c.model.path.empty(), "model.path", "is required (a Hugging Face model directory)");
  require(!d.train.empty(), "data.train", "is required (a .jsonl, .tsv or .csv file)");
  require(d.test_split >= 0 && d.validation_split + d.test_split < 1, "data.test_split",
          "must be >= 0 and leave training data (validation_split + test_split < 1)");
  require(d.validation_split == 0 || d.validation.empty(), "data.validation_split",
          "cannot be used together with data.validation (a validation file)");
  require(d.test_split == 0 || d.test.empty(), "data.test_split",
          "cannot be used together with data.test (a test file)");
  require(d.folds == 0 || (d.validation.empty() && d.validation_split == 0), "data.folds",
          "takes the validation set from the training file; remove data.validation / "
          "data.validation_split");
  require(d.fold >= 0 && (d.folds == 0 ? d.fold == 0 : d.fold < d.folds), "data.fold",
          fmt::format("must be in [0, data.folds) = [0, {})", d.folds));
  require(t.epochs >= 1 || t.max_steps > 0, "training.epochs", "must be at least 1");
  if (c.model.task == ModelTask::CausalLm) {
    // A causal LM learns the completion's tokens: no labels, heads or class-label keys.
    for (const char* key :
         {"model.labels", "data.text_field", "data.text_pair_field", "data.label_field",
          "data.teacher_field", "data.label_separator", "data.pair_template",
          "data.allow_single_class", "data.group_field", "data.groups_without_positive",
          "data.group_size", "data.folds", "data.fold", "training.loss",
          "training.label_smoothing", "training.class_weights", "training.classifier_dropout",
          "eval.threshold_metric"})
      require(!find(root, key).IsDefined(), key,
              "does not apply to model.task causal_lm (prompt -> completion rows: "
              "data.prompt_field, data.completion_field)");
    require(c.eval.metric == "auto" || c.eval.metric == "loss" || c.eval.metric == "perplexity",
            "eval.metric", "must be auto, loss or perplexity with model.task causal_lm");
  } else {
    for (const char* key : {"data.prompt_field", "data.completion_field",
                            "data.add_special_tokens", "data.append_eos"})
      require(!find(root, key).IsDefined(), key, "applies to model.task causal_lm only");
    require(c.eval.metric != "perplexity", "eval.metric",
            "perplexity is a causal LM's metric (model.task causal_lm)");
  }
  resolve_batch_sizes(c.training, root, origin);
  if (t.loss == LossSetting::Listwise || t.loss == LossSetting::MarginMse) {
    const std::string_view loss = choice_name(t.loss);
    require(t.label_smoothing == 0, "training.label_smoothing",
            fmt::format("must be 0 with training.loss {} (a group's target is its {})", loss,
                        t.loss == LossSetting::Listwise ? "positive" : "teacher's margins"));
    require(t.class_weights.empty() && t.class_weights_by_label.empty(), "training.class_weights",
            fmt::format("must be empty with training.loss {} (groups weigh the same)", loss));
  }
}

}  // namespace

TrainConfig TrainConfig::parse(const YAML::Node& root_in, const std::string& name) {
  return parse(root_in, KeyOrigin(name));
}

TrainConfig TrainConfig::parse(const YAML::Node& root_in, const KeyOrigin& origin) {
  const std::string& name = origin.file();
  TrainConfig c;
  if (root_in.IsMap()) {
    // Keys given twice, found on the parsed document itself: a clone loses the line numbers.
    std::vector<std::string> ignored;
    leaf_keys(root_in, "", ignored, name);
  }
  YAML::Node root = root_in.IsNull() ? YAML::Node(YAML::NodeType::Map) : YAML::Clone(root_in);
  if (!root.IsMap())
    throw InputError(fmt::format(
        "{}: expected a mapping of sections (model, data, training, eval, early_stopping, "
        "checkpoint, output)",
        name));
  if (root["preset"]) {
    if (!root["preset"].IsScalar())
      throw InputError(fmt::format("{} must be a preset name", origin.key("preset")));
    YAML::Node defaults = preset_defaults(root["preset"].Scalar(), origin.of("preset"));
    // A preset gives the recipe's effective batch; a user who sets the micro-batch or the
    // accumulation defines the effective batch through them instead.
    if (root["training"] && root["training"].IsMap() &&
        (root["training"]["batch_size"] || root["training"]["gradient_accumulation"]))
      defaults["training"].remove("effective_batch_size");
    fill_missing(root, defaults);
  }
  const std::vector<ConfigKey>& table = config_keys();
  std::vector<std::string> keys;
  leaf_keys(root, "", keys, name);
  for (const std::string& k : keys) {
    const bool known = std::any_of(table.begin(), table.end(), [&](const ConfigKey& row) {
      return row.read && row.key == k;
    });
    if (known || k == "peft" || k.rfind("peft.", 0) == 0 ||
        k.rfind("training.class_weights.", 0) == 0 ||  // a map keyed by label names
        k.rfind("data.pair_template.", 0) == 0)  // an unquoted "{text}": its reader explains
      continue;
    const std::string best = closest_config_key(k);
    throw InputError(fmt::format("{}: unknown key '{}'{}", origin.of(k), k,
                                 best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best)));
  }
  for (const ConfigKey& row : table)
    if (row.read)
      if (const YAML::Node n = find(root, row.key); n.IsDefined() && !n.IsNull())
        row.read(c, n, origin.key(row.key));

  if (root["peft"]) c.peft = parse_adapter_config(root["peft"], origin.of("peft") + ": peft");
  for (const ConfigKey& row : table)
    if (row.check) row.check(c, origin.key(row.key));
  check_rules(c, root, origin);
  c.resolved = YAML::Clone(root);
  return c;
}

TrainConfig TrainConfig::load(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& overrides_origin) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError(fmt::format("{}: cannot open the configuration file", path));
  } catch (const YAML::ParserException& e) {
    throw InputError(
        fmt::format("{}:{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  apply_overrides(root, overrides);
  return parse(root, KeyOrigin(path, overrides, overrides_origin));
}

std::vector<float> resolve_class_weights(const TrainConfig::Training& t,
                                         const std::vector<std::string>& labels) {
  const auto fail = [&](const std::string& what) {
    throw InputError(fmt::format("key 'training.class_weights' {} (the labels in id order: {})",
                                 what, fmt::join(labels, ", ")));
  };
  std::vector<float> w;
  if (!t.class_weights.empty()) {
    if (t.class_weights.size() != labels.size())
      fail(fmt::format("has {} values but the task has {} labels", t.class_weights.size(),
                       labels.size()));
    w.assign(t.class_weights.begin(), t.class_weights.end());
  } else if (!t.class_weights_by_label.empty()) {
    w.assign(labels.size(), 1.0f);
    for (const auto& [label, weight] : t.class_weights_by_label) {
      const auto it = std::find(labels.begin(), labels.end(), label);
      if (it == labels.end()) fail(fmt::format("names the label '{}', which is not one", label));
      w[it - labels.begin()] = static_cast<float>(weight);
    }
  }
  for (float v : w)
    if (!(v >= 0) || !std::isfinite(v)) fail(fmt::format("has the weight {}; expected >= 0", v));
  return w;
}

void apply_overrides(YAML::Node root, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError(fmt::format("override '{}' must look like section.key=value", o));
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw InputError(fmt::format("override '{}': invalid value: {}", o, e.what()));
    }
    set_dotted(root, o.substr(0, eq), value);
  }
}

Device training_device(const TrainConfig& config) {
  return usable_device(config.training.device, "key 'training.device'");
}

}  // namespace ftune
