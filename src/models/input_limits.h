// What a model directory accepts as input, checked before any data is tokenized: the longest
// sequence its positions allow (ModelInfo::max_tokens), and a tokenizer whose every id has an
// embedding row (a tokenizer larger than the model's vocabulary would fail only at the first
// batch that uses one of the missing ids).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/backbone.h"
#include "text/tokenizer.h"

namespace ftune {

// Throws InputError naming DIR/tokenizer.json, DIR/config.json and both sizes when the
// tokenizer's vocabulary (added tokens included) is larger than the model's embedding.
void check_tokenizer_vocabulary(const text::Tokenizer& tokenizer, const ModelInfo& config,
                                const std::string& model_dir);

// The truncation length of `ftune predict` / `ftune eval`: `requested` (--max-length) when given,
// refused (InputError naming `option`) above the model's positions; otherwise the positions,
// bounded by the tokenizer's model_max_length as transformers' truncation=True is.
int64_t inference_max_length(const ModelInfo& config, const text::Tokenizer& tokenizer,
                             std::optional<int64_t> requested, const std::string& model_dir,
                             const std::string& option);

}  // namespace ftune
