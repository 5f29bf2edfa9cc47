// tokenizer_config.json: the transformers settings that change what `tokenizer(text, pair)`
// returns for a fast tokenizer loaded from tokenizer.json (transformers 5: TokenizersBackend /
// PreTrainedTokenizerFast), and nothing else:
//   bos/eos/unk/sep/pad/cls/mask_token, additional_special_tokens, extra_special_tokens,
//   added_tokens_decoder            special tokens missing from tokenizer.json's added tokens are
//                                   added, as transformers does at load
//   split_special_tokens            special tokens are not matched in the text
//   model_max_length                max_length when truncation or padding to max length is asked
//                                   without one (ignored when >= 1e30, transformers' "no limit")
//   padding_side, truncation_side   default sides
//   pad_token                       the id used for padding
// add_bos_token / add_eos_token are ignored, as transformers 5 ignores them when a tokenizer.json
// exists (the post-processor in the file decides). tokenizer.json is authoritative: transformers
// 5's model-specific classes named by "tokenizer_class" (e.g. LlamaTokenizer) may rebuild their
// pipeline from the vocabulary instead; ftune does not imitate such rebuilds.
#pragma once

#include <string>
#include <string_view>

#include "text/tokenizer.h"

namespace ftune::text {

// Applies tokenizer_config.json (the text of the file; `name` labels errors) to a tokenizer
// loaded from tokenizer.json.
void apply_tokenizer_config(Tokenizer::Impl& impl, std::string_view json_text,
                            const std::string& name);

}  // namespace ftune::text
