// Scoring candidate completions with a causal LM (see predict_candidates.h).
#include "cli/predict_candidates.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "data/completions.h"
#include "data/jsonl.h"
#include "io/atomic_file.h"
#include "io/path_guard.h"
#include "io/signal_cleanup.h"
#include "models/causal_lm_scoring.h"
#include "models/hf_checkpoint.h"
#include "text/tokenizer.h"

namespace ftune::cli {
namespace {

struct CandidateRow {
  std::string prompt;
  std::vector<std::string> candidates;
};

std::vector<CandidateRow> read_rows(const CandidateArgs& a) {
  std::vector<CandidateRow> rows;
  data::for_each_jsonl_object(a.data, [&](const nlohmann::json& obj, int64_t line) {
    CandidateRow row;
    const auto p = obj.find(a.prompt_field);
    if (p == obj.end() || !p->is_string())
      throw InputError(fmt::format("{}:{}: expected a text under '{}' (--prompt-field)", a.data,
                                   line, a.prompt_field));
    row.prompt = p->get<std::string>();
    if (!a.candidates_field.empty()) {
      const auto c = obj.find(a.candidates_field);
      if (c == obj.end() || !c->is_array() || c->empty())
        throw InputError(fmt::format("{}:{}: expected a non-empty list of texts under '{}' "
                                     "(--candidates-field)",
                                     a.data, line, a.candidates_field));
      for (const auto& v : *c) {
        if (!v.is_string() || v.get<std::string>().empty())
          throw InputError(fmt::format("{}:{}: '{}' must hold non-empty texts, got {}", a.data,
                                       line, a.candidates_field, v.dump()));
        row.candidates.push_back(v.get<std::string>());
      }
    } else {
      row.candidates = a.candidates;
    }
    rows.push_back(std::move(row));
  });
  return rows;
}

}  // namespace

void run_candidate_predict(const CandidateArgs& a) {
  io::refuse_output_over_inputs({"--output", a.output}, {{"--data", a.data}, {"--model", a.model}},
                                false);
  io::remove_temporaries_on_signals();
  if (a.threads > 0) set_compute_threads(a.threads);
  if (a.candidates.empty() == a.candidates_field.empty())
    throw InputError("give the candidates either as --candidates \"yes,no\" or as "
                     "--candidates-field KEY (a list per row), not both");
  for (const std::string& c : a.candidates)
    if (c.empty()) throw InputError("--candidates: an empty candidate");
  LoadOptions load;
  load.causal_lm = true;  // a family without an LM head is refused, named
  const ModelSpec spec = load_model_spec(a.model, load);
  const Device device = usable_device(a.device, "--device");
  const text::Tokenizer tok = text::Tokenizer::from_dir(a.model);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<CandidateRow> rows = read_rows(a);
  // The model is planned for a row's candidates in one padded batch of the longest (prompt +
  // candidate) scored.
  int64_t longest = 1, most = 1;
  for (const CandidateRow& r : rows) {
    most = std::max<int64_t>(most, static_cast<int64_t>(r.candidates.size()));
    for (const std::string& c : r.candidates) {
      const int64_t n = static_cast<int64_t>(
          data::tokenize_completion(tok, {r.prompt, c, 0}, -1, 0, a.data, {true, false}).input_ids.size());
      longest = std::max(longest, n);
    }
  }
  if (longest > spec.info().max_tokens)
    throw InputError(fmt::format("{}: a prompt with a candidate takes {} tokens; {} has {} "
                                 "positions",
                                 a.data, longest, a.model, spec.info().max_tokens));
  ClassifierOptions o;
  o.max_batch = most;
  o.max_seq = longest;
  o.training = false;
  o.device = device;
  SequenceClassifier model(spec, o);
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(device, std::move(plan));
  model.bind(arena);
  load_model_weights(model, a.model, load);
  io::AtomicFileWriter out(a.output);
  for (const CandidateRow& r : rows) {
    const std::vector<double> ll = completion_log_likelihoods(model, tok, r.prompt, r.candidates);
    const double top = *std::max_element(ll.begin(), ll.end());
    double z = 0;
    for (const double v : ll) z += std::exp(v - top);
    nlohmann::json probs = nlohmann::json::array();
    for (const double v : ll) probs.push_back(std::exp(v - top) / z);
    const size_t best = std::max_element(ll.begin(), ll.end()) - ll.begin();
    out.write(nlohmann::json{{"candidates", r.candidates},
                             {"log_likelihoods", ll},
                             {"probabilities", probs},
                             {"prediction", r.candidates[best]}}
                  .dump() +
              "\n");
  }
  out.commit();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("scored the candidates of {} rows in {:.2f} s -> {}", rows.size(), secs, a.output);
}

}  // namespace ftune::cli
