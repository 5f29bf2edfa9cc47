// The one entry point from a data file to validated examples: read_dataset(spec) reads a JSONL,
// TSV or CSV file, checks every row before any compute (see readers.h for the checks, plus
// labels outside an explicit label set), applies the bad-row policy and returns the examples with
// their label ids and a report for summary.json. tokenize_dataset then tokenizes them up front, in
// parallel, and adds the time and tokens/s to the report.
//
// How the training config maps to DataSpec (one spec per file; validation and test specs take
// the train set's label names so ids agree):
//   data.train / data.validation / data.test  -> path
//   data.format: auto | jsonl | tsv | csv     -> format (parse_data_format; auto: by extension)
//   data.header: true | false                 -> has_header (TSV/CSV; default true)
//   data.text_field / text_pair_field / label_field -> columns.text / text_pair / label (by name:
//                                                 JSONL keys, header columns)
//   data.text_column / text_pair_column / label_column -> columns.*_index (0-based; files
//                                                 without a header; text_pair_column -1 = none)
//   model.labels: [neg, pos]   (names in id order) -> labels.names
//   model.labels: {neg: 0, pos: 1} (name -> id)    -> labels.ids
//   data.bad_rows: fail | skip                -> bad_rows (parse_bad_row_policy)
//   data.max_bad_fraction: 0.05               -> max_bad_fraction (skip only)
//   data.group_field: query_id                -> columns.group (query groups: data/groups.h)
//   data.groups_without_positive: warn | fail -> refuse_groups_without_positive
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/examples.h"
#include "data/readers.h"
#include "text/tokenizer.h"

namespace ftune::data {

// BadRowPolicy (fail | skip): data/data_choices.h.
// "fail" or "skip"; InputError naming `key` otherwise.
BadRowPolicy parse_bad_row_policy(const std::string& value, const std::string& key);

// An explicit label set: names in id order, or a name -> id map (ids 0..K-1). Both empty: the
// labels are taken from the data (LabelSet::from_examples). How labels are read: examples.h.
struct LabelMapping {
  std::vector<std::string> names;
  std::map<std::string, int32_t> ids;
  // Whether integers may address ids (examples.h); off for a validation or test file read with
  // the label set the training data gave (its ids are ftune's order, not the user's).
  bool integer_aliases = true;

  bool empty() const { return names.empty() && ids.empty(); }
};

// What the label column holds. kLabels: class labels (names). The others are a score task's float
// targets (docs/rerankers.md): kScores any finite number (MSE: regression, teacher
// scores), kUnitScores a number in [0, 1] (BCE: 0/1 relevance or soft targets). A value that is
// not a number (JSON: not a number; TSV/CSV: not a whole decimal number), not finite, or outside
// [0, 1] for kUnitScores is a bad row (PATH:LINE and why), under data.bad_rows like a bad label.
// kLabelLists: multi-label rows (a list of labels per row, readers.h ColumnMap::label_lists),
// read as K targets per row, 1 for each label the row lists and 0 for the others; the label set is
// `labels` (model.labels, or a multi-label checkpoint's id2label), else the data's (every label
// any row lists, ordered as examples.h orders a label set); a label outside an explicit set is a
// bad row.
enum class ScoreTargets { kLabels, kScores, kUnitScores, kLabelLists };

struct DataSpec {
  std::string path;
  DataFormat format = DataFormat::kAuto;
  bool has_header = true;
  ColumnMap columns;
  LabelMapping labels;
  BadRowPolicy bad_rows = BadRowPolicy::kFail;
  double max_bad_fraction = 0.05;
  std::string labels_key = "model.labels";  // names the label mapping in its errors
  // data.groups_without_positive: warn (kept, counted, skipped by ranking metrics and the listwise
  // loss) or fail (InputError naming a line of the first such group).
  bool refuse_groups_without_positive = false;
  // Score tasks: the label column is read as float targets, one per row; every row's label id is
  // 0 (of the one-name label set `labels`, the model's own: e.g. LABEL_0).
  ScoreTargets targets = ScoreTargets::kLabels;
  std::string targets_key = "training.loss";  // names what asked for [0, 1] targets in errors
  // A score task's ranking relevance (TokenizedExample::relevance: ranking metrics, the groups
  // listwise and margin_mse train on): kUnitScores rows are as relevant as their target (0/1
  // relevance); with top_target_relevant (margin_mse: the column is a teacher's score), each
  // group's row with the highest target is its positive (relevance 1) and the others 0; other
  // score tasks have relevance 0.
  bool top_target_relevant = false;
};

// How many bad rows an error message lists (the count is always given).
constexpr int64_t kListedBadRows = 10;
// How many skipped rows a report keeps with their line and reason (all are counted).
constexpr int64_t kKeptBadRows = 1000;

struct DatasetReport {
  std::string path;
  std::string format;                 // jsonl, tsv or csv
  int64_t rows = 0;                   // data rows read (header and blank lines excluded)
  int64_t examples = 0;               // rows kept
  int64_t skipped = 0;                // bad rows dropped under the skip policy
  std::vector<BadRow> skipped_rows;   // the first kKeptBadRows of them, in file order
  std::vector<int64_t> class_counts;  // kept examples per label id
  int64_t groups = 0;                   // query groups (data/groups.h); 0: rows have none
  int64_t groups_without_positive = 0;  // of them, groups with no relevant row
  double read_seconds = 0;            // reading and validation
  bool tokenized = false;             // set by tokenize_dataset, with:
  TokenizeStats tokenize;             // tokens, truncated, longest, seconds

  // {"path", "format", "rows", "examples", "skipped", "skipped_rows": [{"line", "reason"}...],
  //  "class_counts", "read_seconds", with groups "groups" and "groups_without_positive", and once
//  tokenized "tokens", "truncated", "longest",
  //  "tokenize_seconds", "tokens_per_second"}.
  nlohmann::json to_json() const;
};

struct RawDataset {
  std::string path;
  std::vector<RawExample> examples;  // the kept rows, in file order, each with its line
  std::vector<int32_t> label_ids;    // per example, ids in `labels`
  LabelSet labels;
  // Score tasks: one float target per example (multi-label: K per example, 0 or 1); empty
  // otherwise.
  std::vector<float> targets;
  // Per example: its ranking relevance (class labels: data/groups.h relevance_of; score tasks:
  // DataSpec::top_target_relevant).
  std::vector<float> relevance;
};

// A score task's target written as `text`, or nullopt with `problem` saying why it is a bad row
// (not a number, not finite, outside [0, 1] for kUnitScores; `key` names what asked for [0, 1]).
std::optional<float> score_target(const std::string& text, ScoreTargets kind,
                                  const std::string& key, std::string* problem);

// Reads and validates spec.path into `out` (see the top of this file). InputError when the file
// cannot be read, a named column is missing, the policy rejects the bad rows (the message names
// the first kListedBadRows as PATH:LINE: reason, and the count), or no example is left.
DatasetReport read_dataset(const DataSpec& spec, RawDataset* out);

// Tokenizes every example (HF truncation="longest_first" to max_length, parallel over the compute
// pool; with `pair_template`, as it formats a pair); fills report->tokenize and sets
// report->tokenized. Over-long rows are truncated and counted, not rejected.
std::vector<TokenizedExample> tokenize_dataset(const text::Tokenizer& tokenizer,
                                               const RawDataset& dataset, int64_t max_length,
                                               DatasetReport* report,
                                               const text::PairTemplate* pair_template = nullptr);

}  // namespace ftune::data
