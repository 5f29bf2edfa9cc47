// Labelled sentence-pair examples read from JSONL ({"text": ..., "text_pair": ..., "label": ...};
// field names configurable), their label set, and their tokenized form. Bad rows are InputErrors
// naming file:line and the reason.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"

namespace ftune::data {

struct ExampleFields {
  std::string text = "text", text_pair = "text_pair", label = "label";
};

struct RawExample {
  std::string text;
  std::optional<std::string> text_pair;
  std::string label;  // as written: a string, or an integer's decimal form
  int64_t line = 0;
};

std::vector<RawExample> read_examples(const std::string& path, const ExampleFields& fields);

// Label names in id order. Integer labels 0..K-1 keep their ids; string labels are sorted.
struct LabelSet {
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> ids;
  bool integer = false;  // labels were integers (ids are the integers themselves)

  static LabelSet from_examples(const std::vector<RawExample>& examples);
  static LabelSet from_names(const std::vector<std::string>& names);
  // From a name -> id map whose ids are exactly 0..K-1, each once (InputError naming `key`
  // otherwise). As with from_names, an integer label i also addresses the name with id i.
  static LabelSet from_map(const std::map<std::string, int32_t>& ids, const std::string& key);
  // The id of `label` of the example at path:line; InputError when it is not in the set.
  int32_t id(const RawExample& e, const std::string& path) const;
};

struct TokenizedExample {
  std::vector<int32_t> input_ids, token_type_ids;
  int32_t label = -100;
};

struct TokenizeStats {
  int64_t truncated = 0;  // examples longer than max_length before truncation
  int64_t tokens = 0;
  int64_t longest = 0;
  double seconds = 0;  // wall time of the tokenization

  double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

// Tokenizes every example with HF's `tokenizer(text, text_pair, truncation="longest_first",
// max_length=max_length)`, in parallel.
std::vector<TokenizedExample> tokenize_examples(const text::Tokenizer& tokenizer,
                                                const std::vector<RawExample>& raw,
                                                const LabelSet& labels, const std::string& path,
                                                int64_t max_length, TokenizeStats* stats);

}  // namespace ftune::data
