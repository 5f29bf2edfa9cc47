// The training key table (config_keys.h): one row per key, built from a few typed row makers.
#include "train/config_keys.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "core/choice.h"
#include "core/device.h"
#include "core/error.h"
#include "text/pair_template.h"
#include "train/memory_planner.h"
#include "train/presets.h"
#include "train/ranking_metrics.h"

namespace ftune {
namespace {

using Read = std::function<void(TrainConfig&, const YAML::Node&, const std::string&)>;
using Check = std::function<void(const TrainConfig&, const std::string&)>;
using Show = std::function<std::string(const TrainConfig&)>;

// The member a row reads, as an accessor: FIELD(data.max_length).
#define FIELD(path) [](auto& c) -> auto& { return c.path; }

// Reads a YAML scalar as T; InputError naming `where` and what was expected otherwise.
template <typename T>
T read_scalar(const YAML::Node& n, const std::string& where, const std::string& expected) {
  if (!n.IsScalar()) throw InputError(fmt::format("{} must be {}", where, expected));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{} must be {}, got '{}'", where, expected, n.Scalar()));
  }
}

std::vector<std::string> read_strings(const YAML::Node& n, const std::string& where) {
  if (!n.IsSequence()) throw InputError(fmt::format("{} must be a list of strings", where));
  std::vector<std::string> out;
  for (const auto& item : n) {
    if (!item.IsScalar()) throw InputError(fmt::format("{} must be a list of strings", where));
    out.push_back(item.Scalar());
  }
  return out;
}

std::string show_number(double v) { return fmt::format("{}", v); }

// A value's rule and the words that say it was broken ("must be at least 1").
template <typename T>
struct Rule {
  std::function<bool(T)> ok;
  std::string says;   // "must be at least 1"
  std::string range;  // for the type column: "≥ 1"
};
template <typename T>
Rule<T> any() {
  return {nullptr, "", ""};
}
Rule<int64_t> at_least(int64_t n) {
  return {[n](int64_t v) { return v >= n; }, fmt::format("must be at least {}", n),
          fmt::format(">= {}", n)};
}
template <typename T>
Rule<T> non_negative() {
  return {[](T v) { return v >= 0; }, "must be >= 0", ">= 0"};
}
Rule<double> positive() {
  return {[](double v) { return v > 0; }, "must be positive", "> 0"};
}
// An interval written as it reads: interval(0, 1, "[)") is [0, 1).
Rule<double> interval(double lo, double hi, const char* ends) {
  const bool lo_in = ends[0] == '[', hi_in = ends[1] == ']';
  const std::string text = fmt::format("{}{}, {}{}", ends[0], lo, hi, ends[1]);
  return {[=](double v) { return (lo_in ? v >= lo : v > lo) && (hi_in ? v <= hi : v < hi); },
          "must be in " + text, "in " + text};
}

template <typename T>
const char* type_word();
template <>
const char* type_word<int64_t>() {
  return "integer";
}
template <>
const char* type_word<double>() {
  return "number";
}

template <typename F>
ConfigKey number_key(const char* key, F field, std::string help,
                     Rule<std::decay_t<decltype(field(std::declval<TrainConfig&>()))>> rule,
                     Show show = nullptr) {
  using T = std::decay_t<decltype(field(std::declval<TrainConfig&>()))>;
  const std::string expected = std::is_same_v<T, double> ? "a number" : "an integer";
  ConfigKey k;
  k.key = key;
  k.type = rule.range.empty() ? type_word<T>() : fmt::format("{} {}", type_word<T>(), rule.range);
  k.help = help;
  k.read = [field, expected](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    field(c) = read_scalar<T>(n, where, expected);
  };
  if (rule.ok)
    k.check = [field, rule](const TrainConfig& c, const std::string& where) {
      if (!rule.ok(field(c)))
        throw InputError(fmt::format("{} {}", where, rule.says));
    };
  k.show = show ? show : Show([field](const TrainConfig& c) {
    if constexpr (std::is_same_v<T, double>)
      return show_number(field(c));
    else
      return std::to_string(field(c));
  });
  return k;
}

template <typename F>
ConfigKey bool_key(const char* key, F field, std::string help) {
  ConfigKey k;
  k.key = key;
  k.type = "true or false";
  k.help = help;
  k.read = [field](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    field(c) = read_scalar<bool>(n, where, "true or false");
  };
  k.show = [field](const TrainConfig& c) {
    return std::string(field(c) ? "true" : "false");
  };
  return k;
}

// A string; `type` is how the table shows it ("path", "column name").
template <typename F>
ConfigKey string_key(const char* key, F field, const char* type, std::string help,
                     const char* expected = "a string", Check check = nullptr) {
  ConfigKey k;
  k.key = key;
  k.type = type;
  k.help = help;
  k.read = [field, expected](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    field(c) = read_scalar<std::string>(n, where, expected);
  };
  k.check = std::move(check);
  k.show = [field](const TrainConfig& c) { return field(c); };
  return k;
}

// One of a closed set of words, read into the field's enum (its words: choice_names, core/choice.h)
// once, here; a word outside the set is an error naming the key, the words and the closest one.
template <typename F>
ConfigKey choice_key(const char* key, F field, std::string help) {
  using E = std::decay_t<decltype(field(std::declval<TrainConfig&>()))>;
  const std::vector<std::string> words = choice_words(choice_names(E{}));
  ConfigKey k;
  k.key = key;
  k.type = either(words);
  k.help = help;
  k.read = [field, words](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    field(c) = parse_choice<E>(read_scalar<std::string>(n, where, either(words)), where);
  };
  k.show = [field](const TrainConfig& c) { return std::string(choice_name(field(c))); };
  return k;
}

std::vector<ConfigKey> make_keys() {
  const Rule<double> unit_open = interval(0, 1, "[)");
  const Rule<double> dropout{[](double v) { return v == -1 || (v >= 0 && v < 1); },
                             "must be in [0, 1) (or -1: the model's own)", "in [0, 1), or -1"};
  const Show model_own = [](const TrainConfig&) { return std::string("the model's"); };
  std::vector<ConfigKey> k = {
      string_key("preset", FIELD(preset), "preset name",
                 fmt::format("the family's recommended defaults, filled in under your keys: {}",
                             fmt::join(preset_names(), ", ")),
                 "a preset name"),
      string_key("model.path", FIELD(model.path), "path",
                 "the Hugging Face model directory (config.json, weights, tokenizer.json); required",
                 "a path"),
      ConfigKey{"model.labels", "list of strings",
                "label names in id order; default: from the data (the saved model's id2label)",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  c.model.labels = read_strings(n, where);
                },
                nullptr, [](const TrainConfig&) { return std::string("from the data"); }},
      choice_key("model.task", FIELD(model.task),
                 "what the run trains: a classifier (or scorer) on labelled rows, or a causal "
                 "language model on prompt -> completion rows, the loss on the completion only "
                 "(a decoder checkpoint; docs/causal-lm.md)"),
      string_key("data.train", FIELD(data.train), "path",
                 "the training file (.jsonl, .tsv, .csv; RFC 4180 quoting); required", "a path"),
      string_key("data.validation", FIELD(data.validation), "path",
                 "the validation file (optional)", "a path"),
      string_key("data.test", FIELD(data.test), "path", "the test file (optional)", "a path"),
      choice_key("data.format", FIELD(data.format),
                 "file format; auto: by extension, and FlagEmbedding's nested JSONL by its keys"),
      bool_key("data.has_header", FIELD(data.has_header), "TSV / CSV: the first row names the columns"),
      string_key("data.text_field", FIELD(data.text_field), "column",
                 "the first text's column (or 0-based index without a header)", "a string",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.data.text_field.empty()) throw InputError(where + " must name a column");
                 }),
      string_key("data.text_pair_field", FIELD(data.text_pair_field), "column",
                 "the second text's column; empty: single-text task"),
      string_key("data.label_field", FIELD(data.label_field), "column",
                 "the label (or target score, or label list) column", "a string",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.data.label_field.empty()) throw InputError(where + " must name a column");
                 }),
      string_key("data.prompt_field", FIELD(data.prompt_field), "column",
                 "model.task causal_lm: the prompt's column (may be empty text: plain language "
                 "modelling of the completion)",
                 "a string",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.data.prompt_field.empty()) throw InputError(where + " must name a column");
                 }),
      string_key("data.completion_field", FIELD(data.completion_field), "column",
                 "model.task causal_lm: the completion's column, the tokens the loss is on",
                 "a string",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.data.completion_field.empty())
                     throw InputError(where + " must name a column");
                 }),
      bool_key("data.add_special_tokens", FIELD(data.add_special_tokens),
               "model.task causal_lm: the tokenizer adds its special tokens (BOS); false for text "
               "a chat template rendered (python -m ftune.chat)"),
      bool_key("data.append_eos", FIELD(data.append_eos),
               "model.task causal_lm: the EOS id follows each completion; false for text a chat "
               "template rendered (its end of turn is in the text)"),
      string_key("data.teacher_field", FIELD(data.teacher_field), "column",
                 "the teacher's score column (training.loss distill_mse, margin_mse)", "a string",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.data.teacher_field.empty())
                     throw InputError(where + " must name a column");
                 }),
      string_key("data.label_separator", FIELD(data.label_separator), "string",
                 "multi-label rows in TSV / CSV: the labels of a row in one field, joined by this",
                 "a string",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.data.label_separator.empty()) throw InputError(where + " must not be empty");
                 }),
      choice_key("data.bad_rows", FIELD(data.bad_rows),
                 "a bad row (named file:line) fails the run, or is skipped up to max_bad_fraction"),
      number_key("data.max_bad_fraction", FIELD(data.max_bad_fraction),
                 "bad_rows skip: more bad rows than this fraction is an error", unit_open),
      number_key("data.validation_split", FIELD(data.validation_split),
                 "no validation file: this fraction of train, stratified (groups kept whole)",
                 unit_open),
      number_key("data.test_split", FIELD(data.test_split),
                 "no test file: this fraction of train, stratified (groups kept whole); "
                 "validation_split + test_split < 1",
                 any<double>()),
      number_key("data.folds", FIELD(data.folds),
                 "k-fold cross-validation: k (groups kept whole); 0: off",
                 Rule<int64_t>{[](int64_t v) { return v == 0 || v >= 2; },
                               "must be 0 (off) or at least 2", "0 or >= 2"}),
      number_key("data.fold", FIELD(data.fold), "which fold is the validation set, in [0, folds)",
                 any<int64_t>()),
      number_key("data.max_length", FIELD(data.max_length),
                 "tokens per input, special tokens included (longest_first truncation)",
                 at_least(2)),
      ConfigKey{"data.pair_template", "string",
                "decoders: chat-free pair formatting, e.g. \"<bos>{text}\\n{text_pair}<eos>\"; "
                "empty: the model directory's saved template, else tokenizer(text, text_pair)",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  // Unquoted, YAML reads "{text}" as a map: say to quote it.
                  if (!n.IsScalar())
                    throw InputError(fmt::format(
                        "{} must be a string with {{text}} (and {{text_pair}}); quote it in YAML, "
                        "e.g. \"<bos>{{text}}\\n{{text_pair}}<eos>\"",
                        where));
                  c.data.pair_template = n.Scalar();
                },
                [](const TrainConfig& c, const std::string& where) {
                  if (!c.data.pair_template.empty())
                    text::PairTemplate::parse(c.data.pair_template, where);
                },
                [](const TrainConfig& c) { return c.data.pair_template; }},
      choice_key("data.packing", FIELD(data.packing),
                 "micro-batches of packed rows, no padding; auto: where the family and device "
                 "support it"),
      bool_key("data.allow_single_class", FIELD(data.allow_single_class),
               "training data with examples of one label only is allowed"),
      string_key("data.group_field", FIELD(data.group_field), "column",
                 "query groups: the query id column; empty: none (FlagEmbedding's rows carry their "
                 "groups)",
                 "a column name"),
      choice_key("data.groups_without_positive", FIELD(data.groups_without_positive),
                 "a query group with no relevant row: counted with a warning, or an error"),
      number_key("data.group_size", FIELD(data.group_size),
                 "listwise, margin_mse: rows a group trains with, 1 positive + group_size - 1 "
                 "negatives",
                 Rule<int64_t>{[](int64_t v) { return v >= 2; },
                               "must be at least 2 (1 positive + negatives)", ">= 2"}),
      number_key("training.epochs", FIELD(training.epochs), "passes over the training data",
                 any<int64_t>()),
      number_key("training.max_steps", FIELD(training.max_steps),
                 "optimizer steps; > 0 overrides epochs", non_negative<int64_t>()),
      ConfigKey{"training.batch_size", "integer >= 1, or auto",
                "the micro-batch; auto: the largest that fits the memory budget, accumulating to "
                "effective_batch_size",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  c.training.batch_size =
                      n.IsScalar() && n.Scalar() == "auto"
                          ? 0
                          : read_scalar<int64_t>(n, where, "an integer or auto");
                },
                nullptr, [](const TrainConfig&) { return std::string("auto"); }},
      number_key("training.effective_batch_size", FIELD(training.effective_batch_size),
                 "rows (or groups) per optimizer step", any<int64_t>(),
                 [](const TrainConfig&) { return std::string("32"); }),
      number_key("training.gradient_accumulation", FIELD(training.gradient_accumulation),
                 "with a fixed batch_size: micro-batches per step (the planner chooses it with auto)",
                 any<int64_t>(), [](const TrainConfig&) { return std::string("1"); }),
      number_key("training.memory_fraction", FIELD(training.memory_fraction),
                 "share of the device's available memory the plan may use", interval(0, 1, "(]")),
      string_key("training.memory_budget", FIELD(training.memory_budget), "size",
                 "a fixed budget instead of the fraction, e.g. 8GiB", "a size such as 8GiB",
                 [](const TrainConfig& c, const std::string& where) {
                   if (!c.training.memory_budget.empty()) parse_bytes(c.training.memory_budget, where);
                 }),
      choice_key("training.plan_lengths", FIELD(training.plan_lengths),
                 "what the memory plan is made for: data, the run's largest micro-batch "
                 "(its batches walked in order, evaluation included); max_length, rows x "
                 "max_length (the worst case)"),
      number_key("training.learning_rate", FIELD(training.learning_rate), "AdamW's peak rate",
                 positive()),
      number_key("training.layer_decay", FIELD(training.layer_decay),
                 "layer-wise LR decay: layer l of L gets decay^(L - l); 1: off",
                 interval(0, 1, "(]")),
      number_key("training.weight_decay", FIELD(training.weight_decay),
                 "AdamW's decoupled weight decay (not on biases and norms)", non_negative<double>()),
      number_key("training.adam_beta1", FIELD(training.adam_beta1), "AdamW's beta1", unit_open),
      number_key("training.adam_beta2", FIELD(training.adam_beta2), "AdamW's beta2", unit_open),
      number_key("training.adam_epsilon", FIELD(training.adam_epsilon), "AdamW's epsilon",
                 positive()),
      number_key("training.warmup_ratio", FIELD(training.warmup_ratio),
                 "share of the steps with a linear warm-up", unit_open),
      number_key("training.warmup_steps", FIELD(training.warmup_steps),
                 "warm-up steps; > 0 overrides warmup_ratio", non_negative<int64_t>()),
      choice_key("training.schedule", FIELD(training.schedule),
                 "the learning rate after warm-up"),
      number_key("training.max_grad_norm", FIELD(training.max_grad_norm),
                 "gradients are clipped to this global norm", positive()),
      choice_key("training.loss", FIELD(training.loss),
                 "what the head trains on (docs/rerankers.md); auto: cross_entropy for K >= 2 "
                 "labels; for a one-score head mse if it is a regression one, else listwise when "
                 "the training data has query groups, else bce"),
      number_key("training.label_smoothing", FIELD(training.label_smoothing),
                 "cross_entropy's label smoothing", unit_open),
      ConfigKey{"training.class_weights", "list of numbers, or map label: number",
                "cross_entropy's weight per class: a list in id order, or a map by label name "
                "(unnamed labels weigh 1)",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  auto& t = c.training;
                  t.class_weights.clear();
                  t.class_weights_by_label.clear();
                  if (n.IsMap()) {
                    for (const auto& kv : n) {
                      const std::string label = kv.first.as<std::string>();
                      t.class_weights_by_label[label] = read_scalar<double>(
                          kv.second, fmt::format("{} (label '{}')", where, label), "a number");
                    }
                    return;
                  }
                  if (!n.IsSequence())
                    throw InputError(fmt::format("{} must be a list of numbers", where));
                  for (const auto& item : n) {
                    try {
                      t.class_weights.push_back(item.as<double>());
                    } catch (const YAML::Exception&) {
                      throw InputError(fmt::format("{} must be a list of numbers", where));
                    }
                  }
                },
                nullptr, [](const TrainConfig&) { return std::string("unweighted"); }},
      number_key("training.hidden_dropout", FIELD(training.hidden_dropout),
                 "dropout after embeddings and sublayers; -1: the model's own", dropout, model_own),
      number_key("training.attention_dropout", FIELD(training.attention_dropout),
                 "dropout on attention probabilities; -1: the model's own", dropout, model_own),
      number_key("training.classifier_dropout", FIELD(training.classifier_dropout),
                 "dropout before the head; -1: the model's own", dropout, model_own),
      ConfigKey{"training.seed", "non-negative integer",
                "seeds shuffling, dropout (Philox) and new heads",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  c.training.seed = read_scalar<uint64_t>(n, where, "a non-negative integer");
                },
                nullptr, [](const TrainConfig& c) { return std::to_string(c.training.seed); }},
      number_key("training.log_every", FIELD(training.log_every),
                 "steps per logged line (metrics.jsonl, progress)", at_least(1)),
      number_key("training.threads", FIELD(training.threads), "CPU threads; 0: all cores",
                 non_negative<int64_t>()),
      string_key("training.device", FIELD(training.device), "cpu, cuda or cuda:N",
                 "where the arena lives and ops run", "cpu, cuda or cuda:N",
                 [](const TrainConfig& c, const std::string& where) {
                   try {
                     parse_device(c.training.device);
                   } catch (const InputError& e) {
                     throw InputError(fmt::format("{}: {}", where, e.what()));
                   }
                 }),
      choice_key("training.precision", FIELD(training.precision),
                 "compute precision; auto: bf16 on a GPU that has it, else fp32"),
      choice_key("training.tf32", FIELD(training.tf32),
                 "TF32 tensor cores for fp32 GEMMs on a GPU"),
      choice_key("training.attention", FIELD(training.attention),
                 "the kernel of 16-bit attention on a GPU"),
      choice_key("training.cuda_graphs", FIELD(training.cuda_graphs),
                 "CUDA graphs of each micro-batch shape's step"),
      ConfigKey{"training.pad_to_multiple_of", "integer in [1, 4096], or auto",
                "micro-batches are padded to a multiple of this many tokens; auto: 8 on a GPU, 1 "
                "on the CPU",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  c.training.pad_to_multiple_of =
                      n.IsScalar() && n.Scalar() == "auto"
                          ? 0
                          : read_scalar<int64_t>(n, where, "auto or a positive integer");
                },
                [](const TrainConfig& c, const std::string& where) {
                  const int64_t v = c.training.pad_to_multiple_of;
                  if (v < 0 || v > 4096)
                    throw InputError(where + " must be auto or an integer in [1, 4096]");
                },
                [](const TrainConfig&) { return std::string("auto"); }},
      number_key("training.max_nonfinite_steps", FIELD(training.max_nonfinite_steps),
                 "consecutive skipped (non-finite) steps before the run aborts", at_least(1)),
      number_key("training.prefetch", FIELD(training.prefetch),
                 "batches assembled ahead of the step", at_least(1)),
      number_key("training.reduce_bucket_mb", FIELD(training.reduce_bucket_mb),
                 "data-parallel runs: gradients are summed over the ranks in buckets of about this "
                 "many MiB",
                 positive()),
      ConfigKey{"training.gradient_checkpointing", "off, on or auto",
                "recompute each layer's forward in backward; auto: when it lets a larger "
                "micro-batch fit",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  c.training.gradient_checkpointing = parse_gradient_checkpointing(n, where);
                },
                nullptr,
                [](const TrainConfig& c) {
                  return std::string(gradient_checkpointing_name(c.training.gradient_checkpointing));
                }},
  };
  // The peft: section, declared by models/adapter_config.h and read whole by its reader.
  for (const AdapterKey& a : adapter_config_keys())
    k.push_back(ConfigKey{std::string("peft.") + a.key, a.type, a.help, nullptr, nullptr,
                          [show = a.show](const TrainConfig& c) { return show(c.peft); }});
  std::vector<ConfigKey> rest = {
      number_key("eval.every_steps", FIELD(eval.every_steps),
                 "evaluate every this many steps; 0: only at the end of each epoch",
                 non_negative<int64_t>()),
      bool_key("eval.each_epoch", FIELD(eval.each_epoch), "evaluate at the end of each epoch"),
      ConfigKey{"eval.metric", "metric name",
                "the metric that picks the best checkpoint, drives early stopping and is the HPO "
                "objective; auto: f1 (binary), macro_f1, pearson (regression), mse (distillation), "
                "micro_f1 (multi-label), ndcg@10 (groups), loss (causal_lm). Also perplexity "
                "(causal_lm), accuracy, mcc, precision, "
                "recall, roc_auc, average_precision, spearman, mae, subset_accuracy, "
                "macro_roc_auc, and ndcg@K, mrr@K, map, recall@K, group_accuracy",
                [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
                  c.eval.metric = read_scalar<std::string>(n, where, "a metric name");
                },
                [](const TrainConfig& c, const std::string& where) {
                  if (parse_ranking_metric(c.eval.metric, where)) return;
                  static const std::vector<std::string> names = {
                      "auto", "loss", "accuracy", "f1", "macro_f1", "mcc", "precision", "recall",
                      "roc_auc", "average_precision", "pearson", "spearman", "mse", "mae",
                      "micro_f1", "subset_accuracy", "macro_roc_auc", "ndcg@10", "mrr@10", "map",
                      "group_accuracy", "perplexity"};
                  if (std::find(names.begin(), names.end(), c.eval.metric) == names.end())
                    throw InputError(fmt::format("{} must be one of {}, got '{}'", where,
                                                 fmt::join(names, ", "), c.eval.metric));
                },
                [](const TrainConfig& c) { return c.eval.metric; }},
      choice_key("eval.mode", FIELD(eval.mode),
                 "whether the metric is better higher or lower; auto: min for loss, perplexity, mse "
                 "and mae"),
      number_key("eval.batch_size", FIELD(eval.batch_size),
                 "evaluation micro-batch; 0: the training micro-batch", non_negative<int64_t>()),
      choice_key("eval.threshold_metric", FIELD(eval.threshold_metric),
                 "binary tasks: the decision threshold chosen on validation maximises it"),
      number_key("early_stopping.patience", FIELD(early_stopping.patience),
                 "evaluations without improvement before stopping; 0: off",
                 non_negative<int64_t>()),
      number_key("early_stopping.min_delta", FIELD(early_stopping.min_delta),
                 "the least change that counts as an improvement", non_negative<double>()),
      number_key("checkpoint.every_steps", FIELD(checkpoint.every_steps),
                 "checkpoint every this many steps; 0: at every evaluation (and at the end)",
                 non_negative<int64_t>()),
      number_key("checkpoint.keep_last", FIELD(checkpoint.keep_last),
                 "most recent checkpoints kept besides the best", at_least(1)),
      bool_key("checkpoint.save_best", FIELD(checkpoint.save_best),
               "keep the best checkpoint by eval.metric and publish it as the model"),
      string_key("output.dir", FIELD(output.dir), "path",
                 "the run directory (config, metrics, summary, checkpoints, model)", "a path",
                 [](const TrainConfig& c, const std::string& where) {
                   if (c.output.dir.empty()) throw InputError(where + " must name a directory");
                 }),
      bool_key("output.tensorboard", FIELD(output.tensorboard), "write TensorBoard event files"),
      choice_key("output.progress", FIELD(output.progress),
                 "progress display; auto: a bar on a terminal, plain lines otherwise"),
      bool_key("output.overwrite", FIELD(output.overwrite),
               "a directory holding a previous ftune run is replaced (only ftune's own files)"),
      bool_key("output.save_model", FIELD(output.save_model),
               "false: no weights kept (no checkpoints at evaluations or at the end, no model/; "
               "a signal's stop and checkpoint.every_steps still checkpoint): a search trial's "
               "metrics are its result; a test split is scored with the last weights"),
  };
  k.insert(k.end(), rest.begin(), rest.end());
  return k;
}

// Markdown table cells hold no bare pipes.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

std::string closest_config_key(const std::string& unknown) {
  std::vector<std::string> keys;
  for (const ConfigKey& k : config_keys()) keys.push_back(k.key);
  return closest_word(unknown, keys, 3);
}

std::string config_keys_text() {
  const TrainConfig defaults;
  std::string out;
  for (const ConfigKey& k : config_keys()) {
    const std::string d = k.show(defaults);
    out += fmt::format("{}  ({}{})\n    {}\n", k.key, k.type,
                       d.empty() ? "" : fmt::format("; default {}", d), k.help);
  }
  return out;
}

std::string config_keys_markdown() {
  const TrainConfig defaults;
  std::string out =
      "# Configuration keys\n\n"
      "Generated from the key table (`src/train/config_keys.cc`) by `ftune config --keys "
      "--markdown`; a test fails when this page and the table differ. Every key is typed and "
      "checked when the file is read: an unknown key is an error naming it (with the closest "
      "known key), a value of the wrong type or out of range is an error naming the key and where "
      "it was set (the YAML file or a `section.key=value` override). Rules that tie several keys "
      "together (for example `data.validation_split` with a validation file, or the batch sizes) "
      "are listed with the keys they concern in [training.md](training.md).\n";
  std::string section = "-";
  for (const ConfigKey& k : config_keys()) {
    const size_t dot = k.key.find('.');
    const std::string s = dot == std::string::npos ? "" : k.key.substr(0, dot);
    if (s != section) {
      section = s;
      out += fmt::format(
          "\n## `{}`\n\n| key | type | default | what it does |\n| --- | --- | --- | --- |\n",
          s.empty() ? k.key : s + ":");
    }
    const std::string d = k.show(defaults);
    out += fmt::format("| `{}` | {} | {} | {} |\n", k.key, cell(k.type),
                       d.empty() ? "" : "`" + cell(d) + "`", cell(k.help));
  }
  return out;
}

}  // namespace ftune
