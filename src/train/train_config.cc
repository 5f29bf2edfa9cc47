// Typed YAML configuration with unknown-key detection (see train_config.h).
#include "train/train_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/error.h"
#include "train/ranking_metrics.h"
#include "text/pair_template.h"
#include "train/memory_planner.h"
#include "train/presets.h"

namespace ftune {
namespace {

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

struct Field {
  std::string key;       // dotted path
  const char* expected;  // for messages
  std::function<void(const YAML::Node&, const std::string& where)> read;
};

template <typename T>
std::function<void(const YAML::Node&, const std::string&)> scalar(T* dst, const char* expected) {
  return [dst, expected](const YAML::Node& n, const std::string& where) {
    if (!n.IsScalar()) throw InputError(fmt::format("{} must be {}", where, expected));
    try {
      *dst = n.as<T>();
    } catch (const YAML::Exception&) {
      throw InputError(fmt::format("{} must be {}, got '{}'", where, expected, n.Scalar()));
    }
  };
}

template <typename T>
std::function<void(const YAML::Node&, const std::string&)> list(std::vector<T>* dst,
                                                                const char* expected) {
  return [dst, expected](const YAML::Node& n, const std::string& where) {
    if (!n.IsSequence()) throw InputError(fmt::format("{} must be a list of {}", where, expected));
    dst->clear();
    for (const auto& item : n) {
      try {
        dst->push_back(item.as<T>());
      } catch (const YAML::Exception&) {
        throw InputError(fmt::format("{} must be a list of {}", where, expected));
      }
    }
  };
}

std::vector<Field> schema(TrainConfig& c) {
  auto& d = c.data;
  auto& t = c.training;
  auto& e = c.eval;
  const char* path = "a path";
  const char* str = "a string";
  const char* integer = "an integer";
  const char* number = "a number";
  const char* boolean = "true or false";
  std::vector<Field> f = {
      {"preset", "a preset name", scalar(&c.preset, "a preset name")},
      {"model.path", path, scalar(&c.model.path, path)},
      {"model.labels", "a list of label names", list(&c.model.labels, "strings")},
      {"data.train", path, scalar(&d.train, path)},
      {"data.validation", path, scalar(&d.validation, path)},
      {"data.test", path, scalar(&d.test, path)},
      {"data.format", "auto, jsonl, tsv, csv or flagembedding",
       scalar(&d.format, "auto, jsonl, tsv, csv or flagembedding")},
      {"data.has_header", boolean, scalar(&d.has_header, boolean)},
      {"data.text_field", str, scalar(&d.text_field, str)},
      {"data.text_pair_field", str, scalar(&d.text_pair_field, str)},
      {"data.label_field", str, scalar(&d.label_field, str)},
      {"data.teacher_field", str, scalar(&d.teacher_field, str)},
      {"data.bad_rows", "fail or skip", scalar(&d.bad_rows, "fail or skip")},
      {"data.max_bad_fraction", number, scalar(&d.max_bad_fraction, number)},
      {"data.validation_split", number, scalar(&d.validation_split, number)},
      {"data.test_split", number, scalar(&d.test_split, number)},
      {"data.folds", integer, scalar(&d.folds, integer)},
      {"data.fold", integer, scalar(&d.fold, integer)},
      {"data.max_length", integer, scalar(&d.max_length, integer)},
      {"data.pair_template", "a string such as \"<bos>{text}\\n{text_pair}<eos>\"",
       [&d](const YAML::Node& n, const std::string& where) {
         // Unquoted, YAML reads "{text}" as a map: say to quote it.
         if (!n.IsScalar())
           throw InputError(fmt::format(
               "{} must be a string with {{text}} (and {{text_pair}}); quote it in YAML, e.g. "
               "\"<bos>{{text}}\\n{{text_pair}}<eos>\"",
               where));
         d.pair_template = n.Scalar();
       }},
      {"data.packing", "auto, on or off", scalar(&d.packing, "auto, on or off")},
      {"data.allow_single_class", boolean, scalar(&d.allow_single_class, boolean)},
      {"data.group_field", "a column name", scalar(&d.group_field, "a column name")},
      {"data.groups_without_positive", "warn or fail",
       scalar(&d.groups_without_positive, "warn or fail")},
      {"data.group_size", integer, scalar(&d.group_size, integer)},
      {"training.epochs", integer, scalar(&t.epochs, integer)},
      {"training.max_steps", integer, scalar(&t.max_steps, integer)},
      {"training.batch_size", "an integer or auto",
       [&t](const YAML::Node& n, const std::string& where) {
         if (n.IsScalar() && n.Scalar() == "auto")
           t.batch_size = 0;
         else
           scalar(&t.batch_size, "an integer or auto")(n, where);
       }},
      {"training.effective_batch_size", integer, scalar(&t.effective_batch_size, integer)},
      {"training.memory_fraction", number, scalar(&t.memory_fraction, number)},
      {"training.memory_budget", "a size such as 8GiB", scalar(&t.memory_budget, str)},
      {"training.plan_lengths", "data or max_length", scalar(&t.plan_lengths, str)},
      {"training.gradient_accumulation", integer, scalar(&t.gradient_accumulation, integer)},
      {"training.learning_rate", number, scalar(&t.learning_rate, number)},
      {"training.layer_decay", number, scalar(&t.layer_decay, number)},
      {"training.weight_decay", number, scalar(&t.weight_decay, number)},
      {"training.adam_beta1", number, scalar(&t.adam_beta1, number)},
      {"training.adam_beta2", number, scalar(&t.adam_beta2, number)},
      {"training.adam_epsilon", number, scalar(&t.adam_epsilon, number)},
      {"training.warmup_ratio", number, scalar(&t.warmup_ratio, number)},
      {"training.warmup_steps", integer, scalar(&t.warmup_steps, integer)},
      {"training.schedule", "linear, cosine or constant",
       scalar(&t.schedule, "linear, cosine or constant")},
      {"training.max_grad_norm", number, scalar(&t.max_grad_norm, number)},
      {"training.loss",
       "auto, cross_entropy, bce, mse, distill_mse, multi_label_bce, listwise or margin_mse",
       scalar(&t.loss,
              "auto, cross_entropy, bce, mse, distill_mse, multi_label_bce, listwise or margin_mse")},
      {"data.label_separator", str, scalar(&d.label_separator, str)},
      {"training.label_smoothing", number, scalar(&t.label_smoothing, number)},
      {"training.class_weights", "a list of numbers or a map label: number",
       [&t](const YAML::Node& n, const std::string& where) {
         t.class_weights.clear();
         t.class_weights_by_label.clear();
         if (!n.IsMap()) return list(&t.class_weights, "numbers")(n, where);
         for (const auto& kv : n) {
           const std::string label = kv.first.as<std::string>();
           scalar(&t.class_weights_by_label[label], "a number")(
               kv.second, fmt::format("{} (label '{}')", where, label));
         }
       }},
      {"training.hidden_dropout", number, scalar(&t.hidden_dropout, number)},
      {"training.attention_dropout", number, scalar(&t.attention_dropout, number)},
      {"training.classifier_dropout", number, scalar(&t.classifier_dropout, number)},
      {"training.seed", "a non-negative integer", scalar(&t.seed, "a non-negative integer")},
      {"training.log_every", integer, scalar(&t.log_every, integer)},
      {"training.threads", integer, scalar(&t.threads, integer)},
      {"training.device", "cpu, cuda or cuda:N", scalar(&t.device, "cpu, cuda or cuda:N")},
      {"training.precision", "auto, fp32, bf16 or fp16",
       scalar(&t.precision, "auto, fp32, bf16 or fp16")},
      {"training.tf32", "auto, on or off", scalar(&t.tf32, "auto, on or off")},
      {"training.attention", "auto, ftune or cudnn", scalar(&t.attention, "auto, ftune or cudnn")},
      {"training.cuda_graphs", "auto, on or off", scalar(&t.cuda_graphs, "auto, on or off")},
      {"training.pad_to_multiple_of", "auto or a positive integer",
       [&t](const YAML::Node& n, const std::string& where) {
         if (n.IsScalar() && n.Scalar() == "auto")
           t.pad_to_multiple_of = 0;
         else
           scalar(&t.pad_to_multiple_of, "auto or a positive integer")(n, where);
       }},
      {"training.max_nonfinite_steps", integer, scalar(&t.max_nonfinite_steps, integer)},
      {"training.prefetch", integer, scalar(&t.prefetch, integer)},
      {"training.reduce_bucket_mb", number, scalar(&t.reduce_bucket_mb, number)},
      {"training.gradient_checkpointing", "off, on or auto",
       [&t](const YAML::Node& n, const std::string& where) {
         t.gradient_checkpointing = parse_gradient_checkpointing(n, where);
       }},
      {"eval.every_steps", integer, scalar(&e.every_steps, integer)},
      {"eval.each_epoch", boolean, scalar(&e.each_epoch, boolean)},
      {"eval.metric", "a metric name", scalar(&e.metric, "a metric name")},
      {"eval.mode", "max, min or auto", scalar(&e.mode, "max, min or auto")},
      {"eval.batch_size", integer, scalar(&e.batch_size, integer)},
      {"eval.threshold_metric", "f1, mcc or accuracy",
       scalar(&e.threshold_metric, "f1, mcc or accuracy")},
      {"early_stopping.patience", integer, scalar(&c.early_stopping.patience, integer)},
      {"early_stopping.min_delta", number, scalar(&c.early_stopping.min_delta, number)},
      {"checkpoint.every_steps", integer, scalar(&c.checkpoint.every_steps, integer)},
      {"checkpoint.keep_last", integer, scalar(&c.checkpoint.keep_last, integer)},
      {"checkpoint.save_best", boolean, scalar(&c.checkpoint.save_best, boolean)},
      {"output.dir", path, scalar(&c.output.dir, path)},
      {"output.tensorboard", boolean, scalar(&c.output.tensorboard, boolean)},
      {"output.progress", "auto, bar or plain", scalar(&c.output.progress, "auto, bar or plain")},
      {"output.overwrite", boolean, scalar(&c.output.overwrite, boolean)},
  };
  return f;
}

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
  std::vector<Field> fields = schema(c);
  std::set<std::string> known;
  for (const Field& f : fields) known.insert(f.key);
  std::vector<std::string> keys;
  leaf_keys(root, "", keys, name);
  for (const std::string& k : keys) {
    if (known.count(k) || k == "peft" || k.rfind("peft.", 0) == 0 ||
        k.rfind("training.class_weights.", 0) == 0 ||  // a map keyed by label names
        k.rfind("data.pair_template.", 0) == 0)  // an unquoted "{text}": its reader explains
      continue;
    std::string best;
    size_t best_d = 4;
    for (const std::string& cand : known)
      if (size_t d = edit_distance(k, cand); d < best_d) best_d = d, best = cand;
    throw InputError(fmt::format("{}: unknown key '{}'{}", origin.of(k), k,
                                 best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best)));
  }
  for (const Field& f : fields)
    if (const YAML::Node n = find(root, f.key); n.IsDefined() && !n.IsNull())
      f.read(n, origin.key(f.key));

  if (root["peft"]) c.peft = parse_adapter_config(root["peft"], origin.of("peft") + ": peft");
  auto require = [&](bool ok, const std::string& key, const std::string& what) {
    if (!ok) throw InputError(fmt::format("{} {}", origin.key(key), what));
  };
  auto one_of = [&](const std::string& value, std::initializer_list<const char*> allowed,
                    const std::string& key) {
    for (const char* a : allowed)
      if (value == a) return;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    throw InputError(fmt::format("{} must be one of {}, got '{}'", origin.key(key), list, value));
  };
  const auto& d = c.data;
  const auto& t = c.training;
  require(!c.model.path.empty(), "model.path", "is required (a Hugging Face model directory)");
  require(!d.train.empty(), "data.train", "is required (a .jsonl, .tsv or .csv file)");
  one_of(d.format, {"auto", "jsonl", "tsv", "csv", "flagembedding"}, "data.format");
  one_of(d.bad_rows, {"fail", "skip"}, "data.bad_rows");
  one_of(d.packing, {"auto", "on", "off"}, "data.packing");
  require(d.max_bad_fraction >= 0 && d.max_bad_fraction < 1, "data.max_bad_fraction",
          "must be in [0, 1)");
  require(!d.text_field.empty(), "data.text_field", "must name a column");
  require(!d.label_field.empty(), "data.label_field", "must name a column");
  require(d.validation_split >= 0 && d.validation_split < 1, "data.validation_split",
          "must be in [0, 1)");
  require(d.test_split >= 0 && d.validation_split + d.test_split < 1, "data.test_split",
          "must be >= 0 and leave training data (validation_split + test_split < 1)");
  require(d.validation_split == 0 || d.validation.empty(), "data.validation_split",
          "cannot be used together with data.validation (a validation file)");
  require(d.test_split == 0 || d.test.empty(), "data.test_split",
          "cannot be used together with data.test (a test file)");
  require(d.folds == 0 || d.folds >= 2, "data.folds", "must be 0 (off) or at least 2");
  require(d.folds == 0 || (d.validation.empty() && d.validation_split == 0), "data.folds",
          "takes the validation set from the training file; remove data.validation / "
          "data.validation_split");
  require(d.fold >= 0 && (d.folds == 0 ? d.fold == 0 : d.fold < d.folds), "data.fold",
          fmt::format("must be in [0, data.folds) = [0, {})", d.folds));
  require(d.max_length >= 2, "data.max_length", "must be at least 2");
  if (!d.pair_template.empty())
    text::PairTemplate::parse(d.pair_template, origin.key("data.pair_template"));
  require(t.epochs >= 1 || t.max_steps > 0, "training.epochs", "must be at least 1");
  require(t.max_steps >= 0, "training.max_steps", "must be >= 0");
  resolve_batch_sizes(c.training, root, origin);
  require(t.learning_rate > 0, "training.learning_rate", "must be positive");
  require(t.layer_decay > 0 && t.layer_decay <= 1, "training.layer_decay", "must be in (0, 1]");
  require(t.weight_decay >= 0, "training.weight_decay", "must be >= 0");
  require(t.adam_beta1 >= 0 && t.adam_beta1 < 1, "training.adam_beta1", "must be in [0, 1)");
  require(t.adam_beta2 >= 0 && t.adam_beta2 < 1, "training.adam_beta2", "must be in [0, 1)");
  require(t.adam_epsilon > 0, "training.adam_epsilon", "must be positive");
  require(t.warmup_ratio >= 0 && t.warmup_ratio < 1, "training.warmup_ratio", "must be in [0, 1)");
  require(t.warmup_steps >= 0, "training.warmup_steps", "must be >= 0");
  require(t.max_grad_norm > 0, "training.max_grad_norm", "must be positive");
  require(t.label_smoothing >= 0 && t.label_smoothing < 1, "training.label_smoothing",
          "must be in [0, 1)");
  for (const char* k : {"hidden_dropout", "attention_dropout", "classifier_dropout"}) {
    const double v = std::string(k) == "hidden_dropout"      ? t.hidden_dropout
                     : std::string(k) == "attention_dropout" ? t.attention_dropout
                                                             : t.classifier_dropout;
    require(v == -1 || (v >= 0 && v < 1), std::string("training.") + k,
            "must be in [0, 1) (or -1: the model's own)");
  }
  require(t.log_every >= 1, "training.log_every", "must be at least 1");
  require(t.threads >= 0, "training.threads", "must be >= 0");
  try {
    parse_device(t.device);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", origin.key("training.device"), e.what()));
  }
  require(t.memory_fraction > 0 && t.memory_fraction <= 1, "training.memory_fraction",
          "must be in (0, 1]");
  if (!t.memory_budget.empty()) parse_bytes(t.memory_budget, origin.key("training.memory_budget"));
  one_of(t.plan_lengths, {"data", "max_length"}, "training.plan_lengths");
  one_of(t.precision, {"auto", "fp32", "bf16", "fp16"}, "training.precision");
  one_of(t.tf32, {"auto", "on", "off"}, "training.tf32");
  one_of(t.attention, {"auto", "ftune", "cudnn"}, "training.attention");
  one_of(t.cuda_graphs, {"auto", "on", "off"}, "training.cuda_graphs");
  require(t.pad_to_multiple_of >= 0 && t.pad_to_multiple_of <= 4096, "training.pad_to_multiple_of",
          "must be auto or an integer in [1, 4096]");
  require(t.max_nonfinite_steps >= 1, "training.max_nonfinite_steps", "must be at least 1");
  require(t.prefetch >= 1, "training.prefetch", "must be at least 1");
  require(t.reduce_bucket_mb > 0, "training.reduce_bucket_mb", "must be positive");
  one_of(t.schedule, {"linear", "cosine", "constant"}, "training.schedule");
  one_of(t.loss,
         {"auto", "cross_entropy", "bce", "mse", "distill_mse", "multi_label_bce", "listwise",
          "margin_mse"},
         "training.loss");
  require(!d.label_separator.empty(), "data.label_separator", "must not be empty");
  require(!d.teacher_field.empty(), "data.teacher_field", "must name a column");
  require(c.eval.every_steps >= 0, "eval.every_steps", "must be >= 0");
  if (!parse_ranking_metric(c.eval.metric, origin.key("eval.metric")))
    one_of(c.eval.metric,
           {"auto", "loss", "accuracy", "f1", "macro_f1", "mcc", "precision", "recall", "roc_auc",
            "average_precision", "pearson", "spearman", "mse", "mae", "micro_f1", "subset_accuracy",
            "macro_roc_auc", "ndcg@10", "mrr@10", "map", "group_accuracy"},
           "eval.metric");
  one_of(c.data.groups_without_positive, {"warn", "fail"}, "data.groups_without_positive");
  require(c.data.group_size >= 2, "data.group_size", "must be at least 2 (1 positive + negatives)");
  if (t.loss == "listwise" || t.loss == "margin_mse") {
    require(t.label_smoothing == 0, "training.label_smoothing",
            fmt::format("must be 0 with training.loss {} (a group's target is its {})", t.loss,
                        t.loss == "listwise" ? "positive" : "teacher's margins"));
    require(t.class_weights.empty() && t.class_weights_by_label.empty(), "training.class_weights",
            fmt::format("must be empty with training.loss {} (groups weigh the same)", t.loss));
  }
  one_of(c.eval.mode, {"auto", "max", "min"}, "eval.mode");
  one_of(c.eval.threshold_metric, {"f1", "mcc", "accuracy"}, "eval.threshold_metric");
  require(c.eval.batch_size >= 0, "eval.batch_size", "must be >= 0");
  require(c.early_stopping.patience >= 0, "early_stopping.patience", "must be >= 0");
  require(c.early_stopping.min_delta >= 0, "early_stopping.min_delta", "must be >= 0");
  require(c.checkpoint.every_steps >= 0, "checkpoint.every_steps", "must be >= 0");
  require(c.checkpoint.keep_last >= 1, "checkpoint.keep_last", "must be at least 1");
  one_of(c.output.progress, {"auto", "bar", "plain"}, "output.progress");
  require(!c.output.dir.empty(), "output.dir", "must name a directory");
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
