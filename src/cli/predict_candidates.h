// `ftune predict --candidates "yes,no"` (or --candidates-field KEY: a list per row) on a causal
// LM (a *ForCausalLM directory, e.g. the model/ a model.task causal_lm run publishes): for every
// JSONL row, log p(candidate | prompt) of each candidate (models/causal_lm_scoring.h
// completion_log_likelihoods: the candidate's tokens summed, no EOS, as lm-evaluation-harness
// scores a continuation), their softmax over the list, and the most likely one as "prediction":
// a fine-tuned LM used as a classifier without generating. The output is written atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftune::cli {

struct CandidateArgs {
  std::string model, data, output, device = "cpu";
  std::string prompt_field = "prompt";
  std::vector<std::string> candidates;  // the same list for every row, or
  std::string candidates_field;         // each row's own list under this key
  int threads = 0;
};

void run_candidate_predict(const CandidateArgs& args);

}  // namespace ftune::cli
