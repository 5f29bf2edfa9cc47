// A model directory loaded for scoring text: the classifier (models/predictor.h), its tokenizer
// (tokenizer.json), the pair template a decoder was trained with, and the truncation length, as
// `ftune predict` uses them on text rows. The engine under the Python package's Model
// (python/src/module.cc): texts or text pairs in, logits out, in input order.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/predictor.h"
#include "text/pair_template.h"
#include "text/tokenizer.h"

namespace ftune {

class TextScorer {
 public:
  // `max_length`: the truncation length (default: the model's positions, bounded by the
  // tokenizer's model_max_length); `pair_template`: "" for the model directory's saved one.
  TextScorer(const std::string& model_dir, Device device,
             std::optional<int64_t> max_length = std::nullopt,
             const std::string& pair_template = "");

  const ModelSpec& spec() const { return model_.spec(); }
  const ModelInfo& info() const { return model_.info(); }
  int64_t num_labels() const { return info().num_labels(); }
  int64_t max_length() const { return max_length_; }
  const text::Tokenizer& tokenizer() const { return tokenizer_; }

  // The token ids the model reads for each input (truncated longest-first to max_length).
  std::vector<data::TokenizedExample> tokenize(const std::vector<text::TextPair>& inputs) const;
  // Logits of each input into `out` (inputs x num_labels, row-major). One call at a time.
  void score(const std::vector<text::TextPair>& inputs, int64_t batch_size, float* out);
  // Logits of rows already tokenized (ids as the model reads them, special tokens included; no
  // truncation: a row longer than the model's positions is an InputError naming it, "row N: ...",
  // as is an id outside the vocabulary).
  void score_tokens(const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                    float* out);

 private:
  LoadedClassifier model_;
  text::Tokenizer tokenizer_;
  std::optional<text::PairTemplate> template_;
  int64_t max_length_ = 0;
};

}  // namespace ftune
