// Labelled sentence-pair examples read from JSONL ({"text": ..., "text_pair": ..., "label": ...};
// field names configurable), their label set, and their tokenized form. Bad rows are InputErrors
// naming file:line and the reason.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/pair_template.h"
#include "text/tokenizer.h"

namespace ftune::data {

struct ExampleFields {
  std::string text = "text", text_pair = "text_pair", label = "label";
};

struct RawExample {
  std::string text;
  std::optional<std::string> text_pair;
  std::string label;  // as written: a string, or an integer's decimal form
  // Multi-label rows (readers.h ColumnMap::label_lists): the row's labels, each as `label` would
  // be (an empty list: none of the labels).
  std::vector<std::string> label_list;
  int64_t line = 0;
  std::string group;      // query id (data.group_field, or a nested row's line): "" = no group
  int64_t group_id = -1;  // dense id of `group` in its file (first appearance order; data/groups.h)
};

std::vector<RawExample> read_examples(const std::string& path, const ExampleFields& fields);

// A label set: a bijection between label names and class ids 0..K-1 (names[id], ids[name]).
// How data labels are read (docs/training.md "Labels"):
//   - Every label is a name, whatever it looks like: "pos", "1", "-1" and "5000" alike. A JSON
//     integer is the name of its decimal form (1 -> "1").
//   - A set taken from the data (from_examples) is ordered numerically when every name is an
//     integer (an optional '-' and up to 18 digits), else by byte order. So the ids 0..K-1 that
//     HF datasets store keep their values ({0, 1, 2} -> ids 0, 1, 2), and any other integers are
//     names too ({1, 2} -> "1" id 0, "2" id 1; {-1, 0, 1} -> ids 0, 1, 2): never a phantom class.
//     One integer written two ways ("1" and "01") is an error naming both lines.
//   - The one alias: when the names are given in id order (model.labels: [neg, pos], or a saved
//     model's id2label such as LABEL_0, LABEL_1) and none of them is an integer, the integer i
//     (written canonically, 0..K-1) also addresses the class with id i, as HF datasets store a
//     ClassLabel column. An alias never shadows a name; a set taken from the data has none.
struct LabelSet {
  std::vector<std::string> names;                // by id
  std::unordered_map<std::string, int32_t> ids;  // name -> id: exactly the inverse of names
  bool integer_aliases = false;                  // "0".."K-1" address ids (no name is an integer)

  // From the labels of `examples` (path names the file in errors).
  static LabelSet from_examples(const std::vector<RawExample>& examples,
                                const std::string& path = "");
  // Names in id order; a name given twice is an InputError naming `key`.
  static LabelSet from_names(const std::vector<std::string>& names,
                             const std::string& key = "model.labels");
  // From a name -> id map whose ids are exactly 0..K-1, each once (InputError naming `key`
  // otherwise).
  static LabelSet from_map(const std::map<std::string, int32_t>& ids, const std::string& key);
  // The id `label` stands for: its name, else (integer_aliases) its id; nullopt otherwise.
  std::optional<int32_t> find(const std::string& label) const;
  // The id of `label` of the example at path:line; InputError when it is not in the set.
  int32_t id(const RawExample& e, const std::string& path) const;
  // "'neg', 'pos'" (the first 8), with ", or an id 0..K-1" when integer aliases are on.
  std::string describe() const;
};

// The value of a label written as an integer (an optional '-' and 1 to 18 digits); nullopt for
// any other text.
std::optional<int64_t> integer_label(const std::string& label);

struct TokenizedExample {
  std::vector<int32_t> input_ids, token_type_ids;
  int32_t label = -100;
  int64_t group = -1;      // query group (RawExample::group_id); -1: none
  float relevance = 0.0f;  // the label as a ranking relevance (data/groups.h relevance_of)
  // Float targets of a score task (data/dataset.h ScoreTargets: a score, a soft target in [0, 1],
  // a teacher's score), W per row (1 for a single score); empty for class labels. `label` is then
  // 0 (the row counts) or -100 (ignored).
  std::vector<float> targets;
  // A causal LM's next-token labels (data/completions.h; Batch::token_labels), one per input id;
  // empty for classification.
  std::vector<int32_t> token_labels;
};

struct TokenizeStats {
  int64_t truncated = 0;  // examples longer than max_length before truncation
  int64_t tokens = 0;
  int64_t longest = 0;
  double seconds = 0;  // wall time of the tokenization

  double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

// Tokenizes every example with HF's `tokenizer(text, text_pair, truncation="longest_first",
// max_length=max_length)`, in parallel; with `pair_template`, as the template formats it
// (text/pair_template.h: its texts cut longest-first, its own tokens kept). `label_ids` (one per
// example): the ids already resolved (a score task's rows), instead of `labels.id`.
std::vector<TokenizedExample> tokenize_examples(const text::Tokenizer& tokenizer,
                                                const std::vector<RawExample>& raw,
                                                const LabelSet& labels, const std::string& path,
                                                int64_t max_length, TokenizeStats* stats,
                                                const text::PairTemplate* pair_template = nullptr,
                                                const std::vector<int32_t>* label_ids = nullptr);

}  // namespace ftune::data
