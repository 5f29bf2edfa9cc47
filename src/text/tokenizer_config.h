// tokenizer_config.json: the transformers settings that change what `tokenizer(text, pair)`
// returns for a fast tokenizer, and nothing else:
//   add_bos_token / add_eos_token   when either key is present, the post-processor becomes
//                                   "[bos] $A [eos]" / "[bos] $A [eos] [bos] $B:1 [eos]:1" built
//                                   from bos_token / eos_token (transformers'
//                                   update_post_processor)
//   bos/eos/unk/sep/pad/cls/mask_token, additional_special_tokens, extra_special_tokens,
//   added_tokens_decoder            special tokens missing from tokenizer.json's added tokens are
//                                   added, as transformers does at load
//   split_special_tokens            special tokens are not matched in the text
//   model_max_length                max_length when truncation or padding to max length is asked
//                                   without one (ignored when >= 1e30, transformers' "no limit")
//   padding_side, truncation_side   default sides
//   pad_token                       the id used for padding
// Model-class specific rewrites transformers may apply on top (e.g. BertTokenizer rebuilding the
// same [CLS]/[SEP] template) are not reproduced; they are identical for standard files.
#pragma once

namespace ftune::text {}
