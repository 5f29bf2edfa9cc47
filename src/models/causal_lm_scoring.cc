// Causal-LM evaluation and candidate scoring (see causal_lm_scoring.h).
#include "models/causal_lm_scoring.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/memory.h"
#include "data/completions.h"

namespace ftune {
namespace {

// The summed negative log-likelihood of the batch's counted tokens, and their count.
std::pair<double, int64_t> summed_nll(SequenceClassifier& model, const Batch& b) {
  model.set_batch(b);
  model.forward(DropoutPlan{});
  HostTensor loss(DType::F32, Shape{1});
  copy(loss.view(), model.loss({}));
  const int64_t n = model.lm_counted_tokens();
  return {n > 0 ? double(loss.data<float>()[0]) * n : 0.0, n};
}

}  // namespace

LmEval evaluate_causal_lm(SequenceClassifier& model, const std::vector<Batch>& batches) {
  if (!model.config().causal_lm)
    throw InputError(fmt::format("{} is not a causal LM: no per-token evaluation",
                                 model.config().architecture));
  double total = 0;
  LmEval e;
  for (const Batch& b : batches) {
    const auto [nll, n] = summed_nll(model, b);
    total += nll;
    e.tokens += n;
  }
  e.loss = e.tokens > 0 ? total / e.tokens : std::nan("");
  e.perplexity = std::exp(e.loss);
  return e;
}

std::vector<double> completion_log_likelihoods(SequenceClassifier& model,
                                               const text::Tokenizer& tokenizer,
                                               const std::string& prompt,
                                               const std::vector<std::string>& candidates,
                                               int32_t eos_id, bool special_tokens) {
  if (!model.config().causal_lm)
    throw InputError(fmt::format("{} is not a causal LM: it cannot score completions",
                                 model.config().architecture));
  // The candidates in padded batches of up to the model's planned rows: one forward a batch, then
  // each row's sum through the head alone.
  std::vector<data::TokenizedCompletion> rows;
  for (const std::string& c : candidates)
    rows.push_back(data::tokenize_completion(tokenizer, {prompt, c, 0}, eos_id, 0,
                                             "candidate '" + c + "'",
                                             {special_tokens, eos_id >= 0}));
  const int64_t per_batch = std::max<int64_t>(1, model.options().max_batch);
  std::vector<double> out;
  for (size_t first = 0; first < rows.size(); first += per_batch) {
    const size_t last = std::min(rows.size(), first + static_cast<size_t>(per_batch));
    const std::vector<data::TokenizedCompletion> part(rows.begin() + first, rows.begin() + last);
    model.set_batch(data::completion_batch(part, 0));
    model.forward(DropoutPlan{});
    for (const double nll : model.lm_row_nll()) out.push_back(-nll);
  }
  return out;
}

}  // namespace ftune
