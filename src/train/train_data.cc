// Reading, validating, splitting and tokenizing the datasets of a run (see train_data.h).
#include "train/train_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/group_splits.h"
#include "data/groups.h"
#include "data/memory_source.h"
#include "data/splits.h"
#include "models/hf_checkpoint.h"
#include "models/input_limits.h"

namespace ftune {
namespace {

// A column given by name (files with a header, JSONL keys) or, without a header, by 0-based index.
void set_column(const std::string& value, const std::string& default_name, int64_t default_index,
                bool has_header, const char* key, std::string* name, int64_t* index) {
  *name = value;
  if (has_header) return;
  if (value == default_name) {
    *index = default_index;
    return;
  }
  try {
    size_t used = 0;
    *index = std::stoll(value, &used);
    if (used == value.size() && *index >= 0) return;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format(
      "key 'data.{}' must be a 0-based column index when data.has_header is false, got '{}'", key,
      value));
}

data::DataSpec spec_for(const TrainConfig& cfg, const std::string& path,
                        const std::vector<std::string>& label_names, bool integer_aliases,
                        const ScoreTask& task) {
  const auto& d = cfg.data;
  data::DataSpec spec;
  spec.path = path;
  spec.format = d.format;
  spec.has_header = d.has_header;
  set_column(d.text_field, "text", 0, d.has_header, "text_field", &spec.columns.text,
             &spec.columns.text_index);
  if (d.text_pair_field.empty()) {
    spec.columns.text_pair.clear();
    spec.columns.text_pair_index = -1;
  } else {
    set_column(d.text_pair_field, "text_pair", -1, d.has_header, "text_pair_field",
               &spec.columns.text_pair, &spec.columns.text_pair_index);
  }
  // A score task reads float targets from the label column (data.teacher_field for distillation).
  set_column(task.target_field(cfg), task.distill ? "teacher_score" : "label", 1, d.has_header,
             task.distill ? "teacher_field" : "label_field", &spec.columns.label,
             &spec.columns.label_index);
  spec.columns.numeric_label = task.scores() && !task.multi_label;
  spec.columns.label_lists = task.multi_label;
  spec.columns.teacher_scores = task.distill;
  spec.top_target_relevant = task.objective == LossSetting::MarginMse;
  spec.columns.list_separator = d.label_separator;
  spec.targets = task.targets();
  spec.targets_key = "training.loss " + task.loss_name;
  // A one-score task's label is the head's; multi-label sets are given like class labels.
  spec.labels.names = task.scores() && !task.multi_label ? task.score_labels : label_names;
  spec.labels.integer_aliases = integer_aliases;
  spec.bad_rows = d.bad_rows;
  spec.max_bad_fraction = d.max_bad_fraction;
  if (!d.group_field.empty())
    set_column(d.group_field, "", -1, d.has_header, "group_field", &spec.columns.group,
               &spec.columns.group_index);
  spec.refuse_groups_without_positive = d.groups_without_positive == GroupsWithoutPositive::Fail;
  return spec;
}

// Whether the training data has query groups: data.group_field, or a JSONL file in
// FlagEmbedding's nested format (its first row; data/groups.h).
bool has_query_groups(const TrainConfig& cfg) {
  const auto& d = cfg.data;
  if (!d.group_field.empty()) return true;
  data::DataFormat format = d.format;
  if (format == data::DataFormat::kAuto) format = data::data_format_for_path(d.train);
  if (format == data::DataFormat::kFlagEmbedding) return true;
  if (format != data::DataFormat::kJsonl) return false;
  std::unique_ptr<std::istream> in;
  if (data::is_memory_path(d.train))
    in = std::make_unique<std::istringstream>(*data::memory_text(d.train));
  else
    in = std::make_unique<std::ifstream>(d.train);
  std::string line;
  while (std::getline(*in, line)) {
    data::ColumnMap columns;
    columns.text = d.text_field;
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      return data::looks_like_flagembedding(line, columns);
  }
  return false;  // unreadable or empty: read_dataset says why
}

// The label set of the training data, checked (docs/training.md "Labels"): a classifier needs 2 labels; a
// training set with examples of one label only is an error unless data.allow_single_class; a
// label with a single example in a set taken from the data gets a warning naming its line (a
// stray value such as 5000 among 0/1 is a class of its own, never a reason to grow the head).
void check_training_labels(const TrainConfig& cfg, const data::RawDataset& raw,
                           const data::DatasetReport& report) {
  const data::LabelSet& labels = raw.labels;
  const std::string& path = cfg.data.train;
  if (labels.names.size() < 2)
    throw InputError(fmt::format(
        "{}: every example has the label '{}'; a classifier needs at least 2 labels (list them "
        "in model.labels, in id order)",
        path, labels.names.front()));
  std::vector<std::string> present;
  for (size_t i = 0; i < labels.names.size(); ++i)
    if (report.class_counts[i] > 0) present.push_back(labels.names[i]);
  if (present.size() < 2) {
    if (!cfg.data.allow_single_class)
      throw InputError(fmt::format(
          "{}: every training example has the label '{}' (of model.labels: {}); training on one "
          "class teaches nothing about the others. Set data.allow_single_class: true to train "
          "anyway",
          path, present.front(), labels.describe()));
    spdlog::warn("{}: every training example has the label '{}' (data.allow_single_class: true)",
                 path, present.front());
  }
  if (cfg.model.labels.empty() && raw.examples.size() >= 10) {
    int64_t singles = 0;
    for (size_t i = 0; i < labels.names.size(); ++i) {
      if (report.class_counts[i] != 1 || ++singles > 3) continue;
      const auto it = std::find(raw.label_ids.begin(), raw.label_ids.end(), static_cast<int32_t>(i));
      spdlog::warn(
          "{}:{}: label '{}' occurs on this row only, and is one of the {} classes; if it is a "
          "mistake, fix the row, or list the labels in model.labels (the row then becomes a bad "
          "row under data.bad_rows)",
          path, raw.examples[it - raw.label_ids.begin()].line, labels.names[i],
          labels.names.size());
    }
    if (singles > 3)
      spdlog::warn("{}: {} more labels occur on one row only", path, singles - 3);
  }
  spdlog::info("labels (id: name, training examples): {}", [&] {
    std::string s;
    for (size_t i = 0; i < labels.names.size() && i < 16; ++i)
      s += fmt::format("{}{}: '{}' {}", i ? ", " : "", i, labels.names[i], report.class_counts[i]);
    if (labels.names.size() > 16) s += ", ...";
    return s;
  }());
}

// A score task's training targets, summarised in the log: a constant target teaches nothing.
void check_training_targets(const TrainConfig& cfg, const ScoreTask& task,
                            const data::RawDataset& raw) {
  const std::string& path = cfg.data.train;
  if (task.multi_label) {
    const size_t K = raw.labels.names.size();
    std::vector<int64_t> rows_with(K, 0);
    for (size_t i = 0; i < raw.targets.size(); ++i) rows_with[i % K] += raw.targets[i] > 0;
    std::string s;
    for (size_t c = 0; c < K && c < 16; ++c)
      s += fmt::format("{}{}: '{}' {}", c ? ", " : "", c, raw.labels.names[c], rows_with[c]);
    spdlog::info("{}: multi-label, {} labels (id: name, training rows listing it): {}{}", path, K,
                 s, K > 16 ? ", ..." : "");
    return;
  }
  double lo = raw.targets.front(), hi = lo, sum = 0;
  int64_t positives = 0;
  for (float t : raw.targets) {
    lo = std::min<double>(lo, t);
    hi = std::max<double>(hi, t);
    sum += t;
    positives += t >= 0.5f ? 1 : 0;
  }
  if (lo == hi)
    throw InputError(fmt::format(
        "{}: every training row has the target {} (column '{}'); training on one value teaches "
        "nothing",
        path, lo, task.target_field(cfg)));
  spdlog::info(
      "{}: {} targets from column '{}' (training.loss {}): min {:g}, max {:g}, mean {:g}{}", path,
      raw.targets.size(), task.target_field(cfg), task.loss_name, lo, hi,
      sum / double(raw.targets.size()),
      task.binary_score() ? fmt::format(", {} of them >= 0.5", positives) : "");
}


}  // namespace

TokenizedSplit make_split(const std::string& name, const std::string& source,
                          std::vector<data::TokenizedExample> examples, int64_t max_length) {
  TokenizedSplit s{name, source, std::move(examples), 0};
  int64_t tokens = 0;
  for (const auto& e : s.examples) {
    s.longest = std::max<int64_t>(s.longest, e.input_ids.size());
    s.shortest = s.shortest == 0 ? static_cast<int64_t>(e.input_ids.size())
                                 : std::min<int64_t>(s.shortest, e.input_ids.size());
    tokens += static_cast<int64_t>(e.input_ids.size());
  }
  spdlog::info("{}: {} examples from {}, {:.1f} tokens on average, longest {} (max_length {})",
               name, s.examples.size(), source,
               s.examples.empty() ? 0.0 : double(tokens) / s.examples.size(), s.longest,
               max_length);
  if (s.examples.empty())
    throw InputError(fmt::format("{}: the {} split has no examples", source, name));
  return s;
}

text::Tokenizer load_run_tokenizer(const TrainConfig& cfg) {
  if (!std::filesystem::is_directory(cfg.model.path))
    throw InputError(fmt::format(
        "key 'model.path': the model directory '{}' {}", cfg.model.path,
        std::filesystem::exists(cfg.model.path) ? "is not a directory" : "does not exist"));
  text::Tokenizer tok = text::Tokenizer::from_dir(cfg.model.path);
  check_tokenizer_vocabulary(tok, load_model_spec(cfg.model.path).info(), cfg.model.path);
  return tok;
}

int64_t usable_max_length(const TrainConfig& cfg) {
  const int64_t positions = load_model_spec(cfg.model.path).info().max_tokens;
  if (cfg.data.max_length <= positions) return cfg.data.max_length;
  spdlog::warn("data.max_length {} exceeds the model's {} positions; using {}", cfg.data.max_length,
               positions, positions);
  return positions;
}

TrainData load_train_data(const TrainConfig& cfg, const text::Tokenizer& tok, int64_t max_length) {
  if (cfg.model.task == ModelTask::CausalLm) return load_completion_data(cfg, tok, max_length);
  const auto& d = cfg.data;
  TrainData out;
  out.task = resolve_score_task(cfg, load_model_spec(cfg.model.path), has_query_groups(cfg));
  data::RawDataset raw_train;
  data::DatasetReport train_report = data::read_dataset(
      spec_for(cfg, d.train, out.task.multi_label ? out.task.score_labels : cfg.model.labels, true,
               out.task),
      &raw_train);
  out.files.push_back(d.train);
  const bool any_pair =
      std::any_of(raw_train.examples.begin(), raw_train.examples.end(),
                  [](const data::RawExample& e) { return e.text_pair.has_value(); });
  if (!any_pair && !d.text_pair_field.empty()) {
    // A misspelled pair column would otherwise turn a pair task into a single-text one silently.
    if (d.text_pair_field != "text_pair")
      throw InputError(fmt::format(
          "{}: no row has the column '{}' (key 'data.text_pair_field'); set it to the second "
          "text's column, or to '' for single-text classification",
          d.train, d.text_pair_field));
    spdlog::info("{}: no row has a 'text_pair': single-text classification", d.train);
  }
  if (out.task.scores())
    check_training_targets(cfg, out.task, raw_train);
  else
    check_training_labels(cfg, raw_train, train_report);
  out.labels = raw_train.labels;
  out.pair_template =
      text::resolve_pair_template(d.pair_template, "key 'data.pair_template'", cfg.model.path);
  const text::PairTemplate* tmpl = out.pair_template ? &*out.pair_template : nullptr;
  auto train_tokens = data::tokenize_dataset(tok, raw_train, max_length, &train_report, tmpl);
  out.report["train_file"] = train_report.to_json();
  if (train_report.skipped > 0)
    spdlog::warn("{}: {} bad rows skipped (data.bad_rows: skip); see summary.json", d.train,
                 train_report.skipped);

  // Parts of the training file: a stratified split or fold k of k (seeded by training.seed); with
  // query groups, whole groups (data/group_splits.h).
  std::vector<int64_t> group_ids;
  for (const auto& e : raw_train.examples) group_ids.push_back(e.group_id);
  const bool grouped = std::any_of(group_ids.begin(), group_ids.end(), [](int64_t g) { return g >= 0; });
  if (d.folds > 0) {
    const data::Fold fold =
        grouped ? data::group_fold(group_ids, d.folds, d.fold, cfg.training.seed)
                : data::stratified_fold(raw_train.label_ids, d.folds, d.fold, cfg.training.seed);
    const std::string what = fmt::format("{} (fold {} of {})", d.train, d.fold, d.folds);
    out.validation =
        make_split("validation", what, data::select(train_tokens, fold.validation), max_length);
    out.train = make_split("train", what, data::select(train_tokens, fold.train), max_length);
  } else if (d.validation_split > 0 || d.test_split > 0) {
    const data::SplitIndices parts =
        grouped ? data::group_split(group_ids, d.validation_split, d.test_split, cfg.training.seed)
                : data::stratified_split(raw_train.label_ids, d.validation_split, d.test_split,
                                         cfg.training.seed);
    const std::string what =
        fmt::format("{} ({} split)", d.train, grouped ? "query-group" : "stratified");
    if (!parts.validation.empty())
      out.validation =
          make_split("validation", what, data::select(train_tokens, parts.validation), max_length);
    if (!parts.test.empty())
      out.test = make_split("test", what, data::select(train_tokens, parts.test), max_length);
    out.train = make_split("train", what, data::select(train_tokens, parts.train), max_length);
  } else {
    out.train = make_split("train", d.train, std::move(train_tokens), max_length);
  }

  auto read_other = [&](const std::string& path, const char* name) {
    data::RawDataset raw;
    data::DatasetReport report = data::read_dataset(
        spec_for(cfg, path, out.labels.names, out.labels.integer_aliases, out.task), &raw);
    out.files.push_back(path);
    auto tokens = data::tokenize_dataset(tok, raw, max_length, &report, tmpl);
    out.report[std::string(name) + "_file"] = report.to_json();
    return make_split(name, path, std::move(tokens), max_length);
  };
  if (!d.validation.empty()) out.validation = read_other(d.validation, "validation");
  if (!d.test.empty()) out.test = read_other(d.test, "test");
  return out;
}

}  // namespace ftune
