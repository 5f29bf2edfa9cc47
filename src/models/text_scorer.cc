// Text in, logits out (see text_scorer.h).
#include "models/text_scorer.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "models/input_limits.h"

namespace ftune {
namespace {

text::Tokenizer model_tokenizer(const std::string& model_dir) {
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    throw InputError(fmt::format("{}: scoring text needs {}/tokenizer.json", model_dir, model_dir));
  return text::Tokenizer::from_dir(model_dir);
}

}  // namespace

TextScorer::TextScorer(const std::string& model_dir, Device device,
                       std::optional<int64_t> max_length, const std::string& pair_template)
    : model_(model_dir, device),
      tokenizer_(model_tokenizer(model_dir)),
      template_(text::resolve_pair_template(pair_template, "pair_template", model_dir)) {
  check_tokenizer_vocabulary(tokenizer_, info(), model_dir);
  max_length_ = inference_max_length(info(), tokenizer_, max_length, model_dir, "max_length");
}

std::vector<data::TokenizedExample> TextScorer::tokenize(
    const std::vector<text::TextPair>& inputs) const {
  text::EncodeOptions opts = tokenizer_.default_options();
  opts.truncation = text::Truncation::kLongestFirst;
  opts.max_length = max_length_;
  const std::vector<text::Encoding> enc =
      template_ ? template_->encode_batch(tokenizer_, inputs, max_length_)
                : tokenizer_.encode_batch(inputs, opts);
  std::vector<data::TokenizedExample> rows(enc.size());
  for (size_t i = 0; i < enc.size(); ++i) {
    rows[i].input_ids.assign(enc[i].ids.begin(), enc[i].ids.end());
    rows[i].token_type_ids.assign(enc[i].type_ids.begin(), enc[i].type_ids.end());
  }
  return rows;
}

void TextScorer::score(const std::vector<text::TextPair>& inputs, int64_t batch_size, float* out) {
  model_.predict(tokenize(inputs), batch_size, out);
}

void TextScorer::score_tokens(const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                              float* out) {
  model_.predict(rows, batch_size, out);
}

}  // namespace ftune
