// Evaluating and using a causal LM (ModelInfo::causal_lm) trained through SequenceClassifier:
//   evaluate_causal_lm    validation loss per token and perplexity over batches with token labels
//                         (the mean over every counted token of all batches, as transformers'
//                         eval loss with num_items_in_batch; perplexity = exp(loss))
//   completion_log_likelihoods  log p(candidate | prompt) summed over the candidate's tokens, for
//                         ranking or classifying by the most likely completion from a given list
//                         ("yes" / "no", label words) without free generation; the prompt and
//                         candidate are tokenized as in training (data/completions.h), without
//                         EOS unless asked (lm-evaluation-harness's loglikelihood)
#pragma once

#include <string>
#include <vector>

#include "data/batch.h"
#include "models/sequence_classifier.h"
#include "text/tokenizer.h"

namespace ftune {

struct LmEval {
  double loss = 0;        // mean negative log-likelihood per counted token
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;     // tokens counted
};

// Each batch must fit the model's plan; rows with no counted token add nothing.
LmEval evaluate_causal_lm(SequenceClassifier& model, const std::vector<Batch>& batches);

// One log-likelihood per candidate (higher: more likely), each its own row of padded batches of up
// to the model's planned max_batch rows (one forward a batch).
// special_tokens false: the prompt is text a chat template rendered (it has its own BOS).
std::vector<double> completion_log_likelihoods(SequenceClassifier& model,
                                               const text::Tokenizer& tokenizer,
                                               const std::string& prompt,
                                               const std::vector<std::string>& candidates,
                                               int32_t eos_id = -1, bool special_tokens = true);

}  // namespace ftune
