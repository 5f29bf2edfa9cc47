// The training configuration: a YAML file plus dotted command-line overrides
// (`training.learning_rate=3e-5`). Every key is typed and validated; an unknown or mistyped key is
// an InputError naming the file, the key and what was expected (with a suggestion for typos). A
// member's initializer is its key's default; the key's type, help and rule are its row in the key
// table (train/config_keys.h), which generates docs/configuration.md. A key with a closed set of
// values is an enum (its words: train/config_choices.h), parsed and checked once by that table.
// A top-level `preset: bert|roberta|xlmr|bge-reranker|minilm` fills the family's recommended
// defaults under the user's keys (train/presets.h). The resolved configuration — preset and
// overrides applied — is saved in the run directory and fingerprinted for resume.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/choice.h"
#include "core/device.h"
#include "data/data_choices.h"
#include "models/adapter_config.h"
#include "optim/lr_schedule.h"
#include "train/config_choices.h"

namespace ftune {

// Where a key's value came from, for messages: the YAML file, or the override that set it
// ("command-line override 'training.epochs=0'"), so an error is blamed on what the user typed.
class KeyOrigin {
 public:
  explicit KeyOrigin(std::string file, std::vector<std::string> overrides = {},
                     std::string label = "command-line override");
  const std::string& file() const { return file_; }
  // "config.yaml" or "command-line override 'training.epochs=0'" (the last override setting
  // `key`, a section above it or a key below it).
  std::string of(const std::string& key) const;
  // "<of(key)>: key 'training.epochs'"
  std::string key(const std::string& key) const;

 private:
  std::string file_;
  std::vector<std::string> overrides_;
  std::string label_;
};

struct TrainConfig {
  std::string preset;  // empty: none
  struct Model {
    std::string path;                 // HF model directory (config.json, weights, tokenizer.json)
    std::vector<std::string> labels;  // label names in id order; empty: from the data
    ModelTask task = ModelTask::Classification;  // causal_lm: prompt -> completion rows
  } model;
  struct Data {
    std::string train, validation, test;  // files (.jsonl, .tsv, .csv); validation/test optional
    data::DataFormat format = data::DataFormat::kAuto;  // auto (by extension), jsonl, tsv, csv, ...
    bool has_header = true;               // TSV/CSV: first row names the columns
    std::string text_field = "text";      // column name (or 0-based index without a header)
    std::string text_pair_field = "text_pair";  // empty: single-text task
    std::string label_field = "label";
    // model.task causal_lm: the prompt's and the completion's columns (data/completions.h).
    std::string prompt_field = "prompt", completion_field = "completion";
    // model.task causal_lm: the tokenizer's special tokens (BOS) and the EOS after the completion;
    // both false for text a chat template rendered (python -m ftune.chat), which has its own.
    bool add_special_tokens = true, append_eos = true;
    // training.loss distill_mse: the column with the teacher's score, the student's target.
    std::string teacher_field = "teacher_score";
    // Multi-label rows in TSV / CSV: the labels of a row in one field, joined by this.
    std::string label_separator = "|";
    data::BadRowPolicy bad_rows = data::BadRowPolicy::kFail;
    double max_bad_fraction = 0.01;  // skip: more bad rows than this fraction is an error
    double validation_split = 0;     // no validation file: this fraction of train (stratified)
    double test_split = 0;           // no test file: this fraction of train (stratified)
    int64_t folds = 0;               // k-fold cross-validation: k (>= 2); 0: off
    int64_t fold = 0;                // which fold is the validation set
    int64_t max_length = 128;        // tokens per input, special tokens included (longest_first)
    // Chat-free pair formatting for decoders (text/pair_template.h), e.g. "<bos>{text}\n{text_pair}<eos>";
    // empty: the model directory's saved template, else HF's tokenizer(text, text_pair).
    std::string pair_template;
    // Micro-batches of packed rows, no padding (data/token_batch.h): auto (on where the model
    // family and the device support it), on or off.
    Switch packing = Switch::Auto;
    bool allow_single_class = false;  // training data with examples of one label only is allowed
    // Query groups (data/groups.h): the query id column; "" = none (FlagEmbedding's nested JSONL
    // has its groups without it). Splits and folds then keep each group whole.
    std::string group_field;
    GroupsWithoutPositive groups_without_positive = GroupsWithoutPositive::Warn;
    int64_t group_size = 8;  // listwise: rows a group trains with, 1 positive + group_size - 1 negatives
  } data;
  struct Training {
    int64_t epochs = 1;
    int64_t max_steps = 0;    // optimizer steps; > 0 overrides epochs
    // Batch sizes (train/memory_planner.h). batch_size is the micro-batch: 0 means auto, the
    // largest that fits the memory budget, accumulating to effective_batch_size. A fixed
    // batch_size with gradient_accumulation gives effective = batch_size x accumulation. After
    // parsing, effective_batch_size is always set, and gradient_accumulation is set for a fixed
    // batch_size (0 with auto: the planner chooses it).
    int64_t batch_size = 0;  // micro-batch; 0: auto
    int64_t gradient_accumulation = 0;
    int64_t effective_batch_size = 0;
    double memory_fraction = 0.95;  // share of the device's available memory the plan may use
    std::string memory_budget;      // "8GiB": a fixed budget instead of the fraction
    PlanLengths plan_lengths = PlanLengths::Data;  // data (longest tokenized sequence) | max_length
    double learning_rate = 5e-5;
    double layer_decay = 1.0;  // layer-wise LR decay: layer l of L gets decay^(L - l)
    double weight_decay = 0.01;
    double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
    double warmup_ratio = 0.1;
    int64_t warmup_steps = 0;  // > 0 overrides warmup_ratio
    ScheduleKind schedule = ScheduleKind::Linear;
    double max_grad_norm = 1.0;
    // auto | cross_entropy | bce | mse | distill_mse | multi_label_bce (train/score_task.h): auto
    // is cross_entropy for a head of K >= 2 labels, bce for a one-score head (mse when the
    // checkpoint's problem_type is regression).
    // listwise: softmax over each query group (data.group_field or FlagEmbedding's format;
    // ops/listwise_loss.h, train/group_sampler.h).
    LossSetting loss = LossSetting::Auto;
    double label_smoothing = 0.0;
    // Loss weight per class: a list in id order, or a map label name -> weight (labels left out
    // weigh 1); resolve_class_weights turns either into one weight per id.
    std::vector<double> class_weights;
    std::map<std::string, double> class_weights_by_label;
    double hidden_dropout = -1, attention_dropout = -1, classifier_dropout = -1;  // -1: model's
    uint64_t seed = 42;
    int64_t log_every = 10;
    int64_t threads = 0;               // 0: all cores
    std::string device = "cpu";        // cpu | cuda | cuda:N: where the arena lives and ops run
    // auto | fp32 | bf16 | fp16 (train/precision.h): auto is bf16 on a GPU with bf16, else fp32.
    PrecisionSetting precision = PrecisionSetting::Auto;
    // auto | on | off: TF32 tensor cores for the fp32 GEMMs on a GPU (train/precision.h).
    Switch tf32 = Switch::Auto;
    // auto | ftune | cudnn: the kernel of 16-bit attention on a GPU (train/precision.h).
    AttentionSetting attention = AttentionSetting::Auto;
    // auto | on | off: CUDA graphs of each micro-batch shape's step (train/step_graphs.h).
    Switch cuda_graphs = Switch::Auto;
    // Micro-batches are padded to a multiple of this many tokens; 0 = auto (8 on a GPU, 1 on the
    // CPU: train/step_graphs.h).
    int64_t pad_to_multiple_of = 0;
    int64_t max_nonfinite_steps = 10;  // consecutive skipped steps before the run aborts
    int64_t prefetch = 4;              // batches assembled ahead of the step
    // Data-parallel runs: gradients are summed over the ranks in buckets of about this many MiB,
    // each as soon as backward has finished its layers (dist/gradient_reducer.h).
    double reduce_bucket_mb = 25;
    GradientCheckpointing gradient_checkpointing = GradientCheckpointing::Auto;  // off|on|auto
  } training;
  AdapterConfig peft;  // `peft:` section (models/adapter_config.h): LoRA / DoRA; default none
  struct Eval {
    int64_t every_steps = 0;  // 0: only at the end of each epoch
    bool each_epoch = true;
    // auto: f1 for binary, macro_f1 otherwise; with query groups ndcg@10, and any of ndcg@K,
    // mrr@K, map, recall@K, group_accuracy (train/ranking_metrics.h)
    std::string metric = "auto";
    MetricMode mode = MetricMode::Auto;  // max | min | auto (min for loss, mse, mae)
    int64_t batch_size = 0;               // 0: the training micro-batch
    ThresholdMetric threshold_metric = ThresholdMetric::F1;  // binary: chosen on validation
  } eval;
  struct EarlyStopping {
    int64_t patience = 0;  // evaluations without improvement; 0: off
    double min_delta = 0;
  } early_stopping;
  struct Checkpoint {
    int64_t every_steps = 0;  // 0: at every evaluation (and at the end)
    int64_t keep_last = 1;    // most recent checkpoints kept besides the best
    bool save_best = true;
  } checkpoint;
  struct Output {
    std::string dir = "runs/ftune";
    bool tensorboard = true;
    ProgressStyle progress = ProgressStyle::Auto;  // auto (bar on a terminal), bar, plain
    bool overwrite = false;         // a directory holding a previous run is replaced
    // false: the run keeps no weights (no checkpoint at evaluations or at the end, no model/):
    // its metrics and summary are its result (a search's trials). A stop by signal still
    // checkpoints, and checkpoint.every_steps still applies, for resuming.
    bool save_model = true;
  } output;

  YAML::Node resolved;  // the configuration after preset and overrides, as saved

  // Loads FILE and applies `overrides` ("a.b=value", value parsed as YAML); an error in a value
  // an override set names that override ("<overrides_origin> 'a.b=value'"), not the file.
  static TrainConfig load(const std::string& path, const std::vector<std::string>& overrides = {},
                          const std::string& overrides_origin = "command-line override");
  // Parses YAML (name labels errors); applies the preset first.
  static TrainConfig parse(const YAML::Node& root, const std::string& name);
  static TrainConfig parse(const YAML::Node& root, const KeyOrigin& origin);

  int64_t effective_batch() const { return training.effective_batch_size; }
};

// training.class_weights as one weight per id of `labels` (empty: unweighted). InputError naming
// the key when a list has the wrong length or a map names a label that is not in the set.
std::vector<float> resolve_class_weights(const TrainConfig::Training& training,
                                         const std::vector<std::string>& labels);

// Applies "a.b=value" overrides to a YAML tree (InputError naming a malformed override).
void apply_overrides(YAML::Node root, const std::vector<std::string>& overrides);

// The device of training.device, checked against this build and machine: throws InputError
// naming the key when CUDA is not built in or the GPU is not visible.
Device training_device(const TrainConfig& config);

}  // namespace ftune
