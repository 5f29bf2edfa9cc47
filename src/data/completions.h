// Prompt -> completion examples for causal-LM fine-tuning (issue 40): rows of a JSONL, TSV or CSV
// file with a prompt and a completion field, tokenized and labelled as TRL's SFTTrainer does for a
// prompt-completion data set with completion-only loss:
//   ids    = tokenizer(prompt + completion) (special tokens as the tokenizer adds them: Llama's
//            and Gemma's BOS, none for Qwen), then the EOS id (TRL appends eos_token to the
//            completion)
//   mask   = 0 over the first len(tokenizer(prompt)) tokens, 1 over the rest
//   labels = the ids where the mask is 1, -100 elsewhere (the prompt is not learned)
// and, as transformers' ForCausalLMLoss shifts them, token_labels[t] = labels[t + 1] (the last
// position -100): what Batch::token_labels holds. Rows longer than max_length are cut at the end
// (right truncation); a row whose completion is cut away entirely is an error naming file:line.
// A row without a completion (missing, not text, or empty) is an error naming file:line and key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/readers.h"
#include "text/tokenizer.h"

namespace ftune::data {

struct CompletionFields {
  std::string prompt = "prompt", completion = "completion";
};

struct CompletionExample {
  std::string prompt, completion;
  int64_t line = 0;
};

// Every row of `path`: JSONL keys, or TSV / CSV header columns (without a header: columns 0 and
// 1). The prompt may be empty (plain language modelling of the completion).
std::vector<CompletionExample> read_completions(const std::string& path, DataFormat format,
                                                bool has_header, const CompletionFields& fields);

struct TokenizedCompletion {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> token_labels;  // shifted: the next token where it is a completion token
  int64_t prompt_tokens = 0;
  int64_t line = 0;
};

// How a row's text becomes ids: the tokenizer's special tokens (BOS) or none, then the EOS or
// not (no EOS: scoring a continuation, as lm-evaluation-harness does; eos_id is then unused).
struct CompletionTokenizing {
  bool special_tokens = true;
  bool append_eos = true;
};

// One example (path names the file in errors). max_length 0: no limit.
TokenizedCompletion tokenize_completion(const text::Tokenizer& tokenizer,
                                        const CompletionExample& example, int32_t eos_id,
                                        int64_t max_length, const std::string& path,
                                        const CompletionTokenizing& how = {});

// The id appended after each completion: eos_token_id of model_dir's config.json (the first of a
// list), else of its generation_config.json. InputError naming `key` (the option or config key
// that gave model_dir) when neither names one.
int32_t completion_eos_id(const std::string& model_dir, const std::string& key);

// Rows laid out as a right-padded Batch (padding: pad_id, mask 0, token label -100).
Batch completion_batch(const std::vector<TokenizedCompletion>& rows, int32_t pad_id);

}  // namespace ftune::data
