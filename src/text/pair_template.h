// Chat-free pair formatting for decoder classifiers: a template such as
// "<bos>{text}\n{text_pair}<eos>" turns an example into token ids as transformers'
// `tokenizer(template.format(text=..., text_pair=...), add_special_tokens=False)` would, with the
// texts (not the template) truncated to fit max_length.
//
//   {text}       the example's text (required, once)
//   {text_pair}  its second text (at most once; empty for single-text examples)
//   {{ and }}    literal braces
//   anything else is literal: special tokens written out (<bos>, <eos>, <|begin_of_text|>, ...)
//   are matched as the tokenizer's added tokens, as HF matches them in text.
//
// The joined string is tokenized without the post-processor's special tokens (the template owns
// them), so a tokenizer whose post-processor adds none (Llama 3's ByteLevel) and one that puts
// <bos> before both texts (Gemma's, Llama 2's TemplateProcessing) behave alike, and the ids are
// transformers' (tests/text/pair_template_test.cc, on the real Gemma 3 and Llama 3 tokenizers).
//
// A run's template travels with the model it trains: every checkpoint and the published model /
// adapter directories carry DIR/ftune.json {"pair_template": SPEC}, and `ftune predict` / `eval`
// on DIR format text the same way unless told otherwise (resolve_pair_template).
// A row longer than max_length is tokenized piece by piece instead and its texts (never the
// template) are cut longest-first (text/truncation.h) to max_length minus the template's tokens;
// across a piece boundary its ids may then differ from the joined string's (Gemma merges a
// literal's trailing space into the next word). Token types are all 0.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace ftune::text {

class PairTemplate {
 public:
  // Parses `spec`; InputError naming `where` for a missing {text}, a repeated or unknown
  // placeholder, or an unmatched brace.
  static PairTemplate parse(const std::string& spec, const std::string& where);

  // Encodes each (text, pair) with the template, in parallel like Tokenizer::encode_batch;
  // max_length 0: no truncation. InputError when the template's own tokens leave no room.
  std::vector<Encoding> encode_batch(const Tokenizer& tokenizer, const std::vector<TextPair>& inputs,
                                     int64_t max_length) const;

  const std::string& spec() const { return spec_; }

 private:
  enum class Kind { Literal, Text, Pair };
  struct Piece {
    Kind kind;
    std::string literal;
  };
  std::string spec_;
  std::vector<Piece> pieces_;
};

// The model directory's ftune metadata, beside config.json.
inline constexpr const char* kFtuneMetadataFile = "ftune.json";

// Writes DIR/ftune.json {"pair_template": t.spec()} atomically.
void save_pair_template(const std::string& dir, const PairTemplate& t);
// The template saved in DIR/ftune.json; nullopt when there is none. A malformed file or template
// is an InputError naming DIR/ftune.json.
std::optional<PairTemplate> saved_pair_template(const std::string& dir);

// The template a command uses: `configured` (parsed, errors naming `key`) when not empty, else
// the one saved in `model_dir`, else none (text pairs as tokenizer(text, text_pair)). Logs which.
std::optional<PairTemplate> resolve_pair_template(const std::string& configured,
                                                  const std::string& key,
                                                  const std::string& model_dir);

}  // namespace ftune::text
