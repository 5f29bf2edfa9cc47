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
  // more pieces, which are concatenated afterwards). Used by Sequence chains.
  virtual void process_encodings(std::vector<Encoding>& encodings,
                                 bool add_special_tokens) const = 0;
  // HF PostProcessor::process for the tokens `a` and, for a pair, `b`: writes the final encoding
  // to `out`. The default goes through process_encodings; the common processors override it to
  // build `out` directly.
  virtual void process(const std::vector<uint32_t>& a, const std::vector<uint32_t>* b,
                       bool add_special_tokens, Encoding& out) const;
};

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node);

// TokenizerImpl::post_process without truncation and padding: `processor` when there is one,
// else the tokens of `a` (type 0) followed by those of `b` (type 1).
void post_process(const PostProcessor* processor, const std::vector<uint32_t>& a,
                  const std::vector<uint32_t>* b, bool add_special_tokens, Encoding& out);

}  // namespace ftune::text
