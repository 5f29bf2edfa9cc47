// Evaluating a causal LM on prompt -> completion rows (see eval_causal_lm.h).
#include "cli/eval_causal_lm.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/arena.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "data/completions.h"
#include "io/json_file.h"
#include "io/path_guard.h"
#include "io/signal_cleanup.h"
#include "models/hf_checkpoint.h"
#include "models/input_limits.h"
#include "models/sequence_classifier.h"
#include "text/tokenizer.h"
#include "train/evaluate.h"

namespace ftune::cli {

bool causal_lm_checkpoint(const std::string& model_dir) {
  const std::filesystem::path config = std::filesystem::path(model_dir) / "config.json";
  if (!std::filesystem::exists(config)) return false;
  const nlohmann::json j = io::read_json_file(config.string());
  const auto it = j.find("architectures");
  if (it == j.end() || !it->is_array()) return false;
  for (const nlohmann::json& a : *it) {
    static const std::string kSuffix = "ForCausalLM";
    if (!a.is_string()) continue;
    const std::string name = a.get<std::string>();
    if (name.size() > kSuffix.size() &&
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0)
      return true;
  }
  return false;
}

void run_causal_lm_eval(const CausalLmEvalArgs& a) {
  if (!a.output.empty())
    io::refuse_output_over_inputs({"--output", a.output},
                                  {{"--data", a.data}, {"--model", a.model}}, false);
  io::remove_temporaries_on_signals();
  if (a.threads > 0) set_compute_threads(a.threads);
  LoadOptions load;
  load.causal_lm = true;  // a family without an LM head is refused, named
  const ModelSpec spec = load_model_spec(a.model, load);
  const text::Tokenizer tok = text::Tokenizer::from_dir(a.model);
  check_tokenizer_vocabulary(tok, spec.info(), a.model);
  const int64_t max_length = inference_max_length(
      spec.info(), tok, a.max_length > 0 ? std::optional<int64_t>(a.max_length) : std::nullopt,
      a.model, "--max-length");
  const int32_t eos = data::completion_eos_id(a.model, "--model");

  const data::CompletionFields fields{a.prompt_field, a.completion_field};
  const std::vector<data::CompletionExample> rows = data::read_completions(
      a.data, data::parse_data_format(a.format, "--format"), !a.no_header, fields);
  if (rows.empty()) throw InputError(fmt::format("{}: no rows", a.data));
  std::vector<data::TokenizedExample> examples;
  int64_t tokens = 0, longest = 1, cut = 0;
  for (const data::CompletionExample& row : rows) {
    data::TokenizedCompletion t = data::tokenize_completion(
        tok, row, eos, max_length, a.data, {!a.rendered_chat, !a.rendered_chat});
    data::TokenizedExample e;
    e.input_ids = std::move(t.input_ids);
    e.token_labels = std::move(t.token_labels);
    e.label = -100;  // no row label: the loss is on the token labels
    const auto n = static_cast<int64_t>(e.input_ids.size());
    tokens += n;
    longest = std::max(longest, n);
    if (n == max_length) ++cut;
    examples.push_back(std::move(e));
  }

  // Padded batches of up to batch_size rows, the arena planned for the longest row present.
  ClassifierOptions o;
  o.max_batch = std::min<int64_t>(a.batch_size, static_cast<int64_t>(examples.size()));
  o.max_seq = longest;
  o.training = false;
  o.device = Device::cpu();
  SequenceClassifier model(spec, o);
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(o.device, std::move(plan));
  model.bind(arena);
  load_model_weights(model, a.model, load);
  const LmEval e = evaluate_lm(model, examples, o.max_batch, 0,
                               static_cast<int32_t>(spec.info().pad_token_id));
  if (!std::isfinite(e.loss))
    throw InputError(
        e.tokens == 0
            ? fmt::format("{}: no completion token to evaluate", a.data)
            : fmt::format("{}: the loss over {} completion tokens is not finite ({}): {} computes "
                          "NaN or infinite values on these rows; no metrics reported",
                          a.data, e.tokens, e.loss, a.model));
  nlohmann::json j = {{"loss", e.loss},
                      {"perplexity", e.perplexity},
                      {"tokens", e.tokens},
                      {"data",
                       {{"path", a.data},
                        {"rows", rows.size()},
                        {"tokens", tokens},
                        {"completion_tokens", e.tokens},
                        {"rows_at_max_length", cut},
                        {"max_length", max_length}}},
                      {"model", a.model}};
  if (cut > 0)
    spdlog::warn("{}: {} rows reach --max-length {} and are cut at the end", a.data, cut,
                 max_length);
  if (!a.output.empty()) io::write_json_atomic(a.output, j);
  std::printf("%s\n", j.dump(2).c_str());
}

}  // namespace ftune::cli
