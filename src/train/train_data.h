// The datasets of a training run: reads the configured files (or splits one file, or takes fold k
// of k), validates every row under the bad-row policy, builds the label set and tokenizes, and
// reports what it did (rows read, skipped with reasons, truncated, tokens, seconds).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/examples.h"
#include "text/pair_template.h"
#include "text/tokenizer.h"
#include "train/score_task.h"
#include "train/train_config.h"

namespace ftune {

struct TokenizedSplit {
  std::string name;    // "train", "validation", "test"
  std::string source;  // file, or "file (fold 2 of 5)"
  std::vector<data::TokenizedExample> examples;
  int64_t longest = 0;
  int64_t shortest = 0;
};

struct TrainData {
  ScoreTask task;  // training.loss resolved against the checkpoint (train/score_task.h)
  // Class labels; a score task's one label (the head's name for its score, e.g. LABEL_0).
  data::LabelSet labels;
  TokenizedSplit train;
  std::optional<TokenizedSplit> validation, test;
  // data.pair_template, else the one saved with model.path; none: tokenizer(text, text_pair).
  // Saved with every checkpoint and the published model (text/pair_template.h).
  std::optional<text::PairTemplate> pair_template;
  std::vector<std::string> files;  // every file read (fingerprinted for resume)
  nlohmann::json report;           // per split: rows, skipped, truncated, tokens, seconds
};

// The tokenizer of model.path, checked before any data is read: the directory exists (else an
// error naming the key) and every token id has a row in the model's embedding.
text::Tokenizer load_run_tokenizer(const TrainConfig& config);

// data.max_length clipped to the positions of the model in model.path (warns when it clips).
int64_t usable_max_length(const TrainConfig& config);

// A split of tokenized examples with its length range, logged; no examples is an InputError
// naming `source`.
TokenizedSplit make_split(const std::string& name, const std::string& source,
                          std::vector<data::TokenizedExample> examples, int64_t max_length);

// model.task causal_lm (train/completion_data.cc): prompt -> completion rows as data/completions.h
// reads and tokenizes them, each example's token_labels the shifted completion tokens (its row
// label -100: none), and the task's causal_lm set.
TrainData load_completion_data(const TrainConfig& config, const text::Tokenizer& tokenizer,
                               int64_t max_length);

// `max_length` is data.max_length already clipped to the model's positions. model.task
// causal_lm: load_completion_data.
TrainData load_train_data(const TrainConfig& config, const text::Tokenizer& tokenizer,
                          int64_t max_length);

}  // namespace ftune
