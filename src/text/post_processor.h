// Post-processors add the special tokens around the encoded sequences and set the segment
// (type) ids (tokenizer.json "post_processor"): TemplateProcessing, BertProcessing,
// RobertaProcessing, ByteLevel (ids unchanged) and Sequence.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/json_node.h"
#include "text/tokenizer.h"

namespace ftune::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Special tokens added to one sequence or to a pair (HF added_tokens), used to shorten
  // max_length before truncation.
  virtual size_t added_tokens(bool is_pair) const = 0;
  // HF process_encodings: rewrites the list of encodings (1 or 2 on entry; a template may return
  // more pieces, which are concatenated afterwards).
  virtual void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node);

// HF PostProcessor::process / TokenizerImpl::post_process without truncation and padding: sets
// type ids 0 / 1, runs `processor` (or concatenates when null) and merges into one encoding.
Encoding post_process(const PostProcessor* processor, Encoding first, std::optional<Encoding> pair,
                      bool add_special_tokens);

}  // namespace ftune::text
