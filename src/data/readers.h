// Readers for labelled examples in JSONL, TSV and CSV files. Each reader turns every data row into
// either a RawExample (with its line) or a BadRow (line and reason): empty or missing text, an
// empty text_pair, a missing label, invalid UTF-8 (reported, never replaced), a ragged row (wrong
// number of fields), an unparsable JSON line or malformed CSV quoting. Problems with the file as a
// whole (cannot open, a named column not in the header) raise InputError at once. Label sets and
// the skip/fail policy live in dataset.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/data_choices.h"
#include "data/examples.h"

namespace ftune::data {

// DataFormat: data/data_choices.h.
// "auto", "jsonl", "tsv", "csv" or "flagembedding"; InputError naming `key` otherwise.
DataFormat parse_data_format(const std::string& value, const std::string& key);
const char* data_format_name(DataFormat format);
// The format for a file name: .jsonl/.ndjson/.json -> JSONL, .tsv/.tab -> TSV, .csv -> CSV
// (case-insensitive); InputError naming the path for any other extension.
DataFormat data_format_for_path(const std::string& path);

// Where the fields of an example are. Names address JSONL keys and TSV/CSV header columns;
// indices (0-based) address TSV/CSV columns of files without a header row.
struct ColumnMap {
  std::string text = "text";
  std::string text_pair = "text_pair";  // optional: rows / files without it have single texts
  std::string label = "label";
  int64_t text_index = 0;
  int64_t text_pair_index = -1;  // -1: no text_pair column
  int64_t label_index = 1;
  std::string group;         // query id column (data.group_field); "" = rows have no group
  int64_t group_index = -1;  // -1: no group column
  // The label column holds numbers (a score task, data/dataset.h ScoreTargets): a JSON number
  // that is not an integer is read as written (1.5, 0.25, 1e-3) instead of being a bad row.
  bool numeric_label = false;
  // The label column holds a list of labels per row (multi-label): a JSON list of strings or
  // integers, or in TSV / CSV one field of labels joined by `list_separator` (an empty field: no
  // label). Without it, a JSON list is a bad row (a label list on a single-label task).
  bool label_lists = false;
  std::string list_separator = "|";
  // The label column holds a teacher's scores (training.loss margin_mse / distill_mse): rows of
  // FlagEmbedding's nested format are labelled by their pos_scores / neg_scores (data/groups.h).
  bool teacher_scores = false;
};

struct BadRow {
  int64_t line = 0;
  std::string reason;
};

struct ReadRows {
  std::vector<RawExample> examples;
  std::vector<BadRow> bad;  // in file order
  int64_t rows = 0;         // data rows seen: examples + bad (header and blank lines excluded)
};

// Reads `path` in `format` (kAuto: by extension, and a .jsonl file whose first row has "query"
// and "pos" arrays and no text column is FlagEmbedding's nested format). `has_header` applies to TSV and CSV only.
ReadRows read_rows(const std::string& path, DataFormat format, bool has_header,
                   const ColumnMap& columns);

}  // namespace ftune::data
