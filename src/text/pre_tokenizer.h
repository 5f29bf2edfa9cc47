// Pre-tokenizers: cut the normalized text into words before the model sees them
// (tokenizer.json "pre_tokenizer"). A pre-tokenizer rewrites the spans of a PreTokenized; spans
// that are added tokens pass through untouched, and empty pieces are dropped, as in HF.
#pragma once

#include <memory>
#include <string>

#include "text/json_node.h"
#include "text/pretokenized.h"

namespace ftune::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenized& pt) const = 0;
};

// Builds a pre-tokenizer from its tokenizer.json description (pre_tokenizer_factory.cc).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node);

// One builder per file; `node` is the pre-tokenizer's JSON object, `type` its "type".
std::unique_ptr<PreTokenizer> make_char_pre_tokenizer(
    const std::string& type, const JsonNode& node);  // char_pre_tokenizers.cc
std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(
    const JsonNode& node);  // byte_level_pre_tokenizer.cc
std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(const JsonNode& node);  // metaspace.cc
std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(
    const JsonNode& node);  // split_pre_tokenizer.cc

}  // namespace ftune::text
