// `ftune eval` on a causal LM (a *ForCausalLM directory, e.g. the model/ a model.task causal_lm
// run publishes): the validation loss per counted token, its perplexity and the token count over
// a file of prompt -> completion rows (JSONL, TSV or CSV), each row tokenized and masked as
// training tokenizes it (data/completions.h: the prompt masked, the completion and EOS counted)
// and evaluated as training evaluates a split (train/evaluate.h evaluate_lm: length-sorted
// batches, the token-weighted mean), so the loss equals the one a run's metrics.jsonl reports on
// the same file with the same max_length.
#pragma once

#include <cstdint>
#include <string>

namespace ftune::cli {

struct CausalLmEvalArgs {
  std::string model, data, output, format = "auto";
  std::string prompt_field = "prompt", completion_field = "completion";
  bool no_header = false;
  bool rendered_chat = false;  // rows a chat template rendered: no special tokens, no EOS
  int64_t batch_size = 64;
  int64_t max_length = 0;  // 0: the model's positions
  int threads = 0;
};

// Whether model_dir's config.json names a *ForCausalLM architecture (eval reads it as a causal LM).
bool causal_lm_checkpoint(const std::string& model_dir);

// Prints the metrics as JSON (and writes them to args.output when given, atomically).
void run_causal_lm_eval(const CausalLmEvalArgs& args);

}  // namespace ftune::cli
