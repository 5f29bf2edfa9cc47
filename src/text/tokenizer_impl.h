// The parts of a loaded tokenizer (private to src/text; the public API is tokenizer.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "text/added_vocabulary.h"
#include "text/decoder.h"
#include "text/model.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace ftune::text {

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;

  EncodeOptions defaults;          // transformers defaults (sides from tokenizer_config.json)
  EncodeOptions json_options;      // tokenizer.json "truncation" / "padding"
  std::optional<uint32_t> pad_id;  // tokenizer_config pad_token, else tokenizer.json padding
  std::optional<int64_t> model_max_length;

  // HF TokenizerImpl::encode_single_sequence + post_process.
  Encoding encode(std::string_view text, std::optional<std::string_view> pair,
                  const EncodeOptions& options) const;
  // Tokens of one sequence, before post-processing.
  void encode_sequence(std::string_view text, std::vector<uint32_t>& ids) const;
  uint32_t token_to_id(std::string_view token) const;
};

// Reads tokenizer.json into `impl` (tokenizer_json.cc).
void load_tokenizer_json(Tokenizer::Impl& impl, std::string_view json_text,
                         const std::string& name);
// Applies tokenizer_config.json (tokenizer_config.cc).
void apply_tokenizer_config(Tokenizer::Impl& impl, std::string_view json_text,
                            const std::string& name);

}  // namespace ftune::text
