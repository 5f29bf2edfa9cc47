// `ftune predict --model DIR --data FILE.jsonl --output FILE.jsonl`: logits and the predicted
// label for every input line; for a one-score model (num_labels 1: a reranker, a cross-encoder, a
// regression head) the score (the logit) and, unless its problem_type is regression, its
// probability sigmoid(score) (and "decision", score > the threshold, when training chose one or
// --threshold gives it); for a multi-label model (problem_type multi_label_classification) the
// probability of each label and the labels above their thresholds. Lines are either tokenized
// ({"input_ids": [...], "token_type_ids": [...]}) or text ({"text": ..., "text_pair": ...},
// tokenized with DIR's tokenizer.json exactly as transformers would, truncated to the model's
// length; formatted with --pair-template or the template training saved in DIR/ftune.json, if
// any). The output is written atomically: on any error nothing is left at --output. With
// --candidates or --candidates-field, a causal LM scores completions instead
// (cli/predict_candidates.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cmath>
#include <filesystem>
#include <optional>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/predict_candidates.h"
#include "core/thread_pool.h"
#include "data/jsonl.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/path_guard.h"
#include "io/signal_cleanup.h"
#include "models/hf_checkpoint.h"
#include "models/input_limits.h"
#include "models/predictor.h"
#include "text/pair_template.h"
#include "text/tokenizer.h"
#include "train/ranking_metrics.h"

namespace ftune::cli {
namespace {

struct PredictArgs {
  std::string model, data, output, device = "cpu";
  int64_t batch_size = 32;
  std::optional<int64_t> max_length;
  int threads = 0;
  std::optional<double> threshold;  // binary: class 1 when its probability exceeds this
  std::string pair_template;        // empty: DIR/ftune.json's, else tokenizer(text, text_pair)
  std::string group_field;          // query id key: each row's score and rank within its group
  // A causal LM's candidate scoring (cli/predict_candidates.h) when either is given.
  std::string candidates, candidates_field, prompt_field = "prompt";
};

// "yes,no" -> {"yes", "no"} (no trimming: a leading space is part of a candidate).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

void run(const PredictArgs& a) {
  io::refuse_output_over_inputs({"--output", a.output}, {{"--data", a.data}, {"--model", a.model}},
                                false);
  io::remove_temporaries_on_signals();
  if (a.threads > 0) set_compute_threads(a.threads);
  // The model and the device first: bad arguments are refused before the data is read.
  const ModelSpec spec = load_model_spec(a.model);
  const ModelInfo config = spec.info();
  const bool one_score = config.num_labels() == 1;
  const bool regression = one_score && spec.problem_type() == "regression";
  const bool multi_label = !one_score && spec.problem_type() == "multi_label_classification";
  if (a.threshold && ((config.num_labels() > 2 && !multi_label) || regression))
    throw InputError(fmt::format(
        "--threshold applies to binary models; {} has {} (binary: 2 labels, one score trained "
        "with bce, or a multi-label model)",
        a.model,
        regression ? "a regression score" : fmt::format("{} labels", config.num_labels())));
  const Device device = usable_device(a.device, "--device");
  const std::optional<text::PairTemplate> tmpl =
      text::resolve_pair_template(a.pair_template, "--pair-template", a.model);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<data::TokenizedExample> rows;
  std::vector<int64_t> lines;
  std::vector<text::TextPair> texts;
  std::vector<size_t> text_rows;  // indices into rows that still need tokenizing
  std::vector<std::string> groups;  // --group-field: each row's query id
  data::for_each_jsonl_object(a.data, [&](const nlohmann::json& obj, int64_t line) {
    data::TokenizedExample row;
    if (!a.group_field.empty()) {
      const auto it = obj.find(a.group_field);
      if (it == obj.end() || !(it->is_string() || it->is_number_integer()))
        throw InputError(fmt::format("{}:{}: '{}' (--group-field) must be a string or an integer",
                                     a.data, line, a.group_field));
      groups.push_back(it->is_string() ? it->get<std::string>()
                                       : std::to_string(it->get<int64_t>()));
    }
    if (obj.contains("input_ids")) {
      row.input_ids = data::jsonl_token_ids(obj["input_ids"], "input_ids", a.data, line);
      if (obj.contains("token_type_ids"))
        row.token_type_ids =
            data::jsonl_token_ids(obj["token_type_ids"], "token_type_ids", a.data, line);
    } else if (obj.contains("text")) {
      const auto& text = obj["text"];
      if (!text.is_string())
        throw InputError(fmt::format("{}:{}: 'text' must be a string", a.data, line));
      text::TextPair pair{text.get<std::string>(), std::nullopt};
      if (obj.contains("text_pair") && !obj["text_pair"].is_null()) {
        if (!obj["text_pair"].is_string())
          throw InputError(fmt::format("{}:{}: 'text_pair' must be a string", a.data, line));
        pair.pair = obj["text_pair"].get<std::string>();
      }
      texts.push_back(std::move(pair));
      text_rows.push_back(rows.size());
    } else {
      throw InputError(fmt::format(
          "{}:{}: expected 'input_ids' (tokenized) or 'text' (and optional 'text_pair')", a.data,
          line));
    }
    rows.push_back(std::move(row));
    lines.push_back(line);
  });
  if (!texts.empty()) {
    if (!std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json"))
      throw InputError(fmt::format("{}: text input needs {}/tokenizer.json", a.data, a.model));
    const text::Tokenizer tok = text::Tokenizer::from_dir(a.model);
    check_tokenizer_vocabulary(tok, config, a.model);
    text::EncodeOptions opts = tok.default_options();
    opts.truncation = text::Truncation::kLongestFirst;
    opts.max_length = inference_max_length(config, tok, a.max_length, a.model, "--max-length");
    const std::vector<text::Encoding> enc = tmpl ? tmpl->encode_batch(tok, texts, opts.max_length)
                                                 : tok.encode_batch(texts, opts);
    for (size_t i = 0; i < enc.size(); ++i) {
      data::TokenizedExample& row = rows[text_rows[i]];
      row.input_ids.assign(enc[i].ids.begin(), enc[i].ids.end());
      row.token_type_ids.assign(enc[i].type_ids.begin(), enc[i].type_ids.end());
    }
  }
  Predictions pred;
  try {
    pred = predict_logits(a.model, rows, a.batch_size, device);
  } catch (const InputError& e) {
    // Map "row N:" back to the input file's line.
    const std::string what = e.what();
    size_t n = 0;
    if (std::sscanf(what.c_str(), "row %zu:", &n) == 1 && n >= 1 && n <= lines.size())
      throw InputError(
          fmt::format("{}:{}:{}", a.data, lines[n - 1], what.substr(what.find(':') + 1)));
    throw;
  }
  // Weights are checked at load (io::check_finite); logits that still overflow are an error, not
  // a label: NaN would pick class 0 silently.
  for (size_t i = 0; i < pred.logits.size(); ++i)
    for (float v : pred.logits[i])
      if (!std::isfinite(v))
        throw InputError(fmt::format(
            "{}:{}: the logits of this row are not finite ([{}]): {} computes NaN or infinite "
            "values on it; no predictions written",
            a.data, lines[i], fmt::join(pred.logits[i], ", "), a.model));
  double threshold = a.threshold.value_or(-1);  // < 0: argmax
  std::optional<double> saved_margin;  // exact: the histogram edge training chose
  const std::string saved = (std::filesystem::path(a.model) / "decision_threshold.json").string();
  // Multi-label: a logit threshold per label (decision_threshold.json's margins, chosen on
  // validation; --threshold: one probability for every label; else probability 0.5).
  std::vector<double> label_margins(
      static_cast<size_t>(config.num_labels()),
      a.threshold ? std::log(*a.threshold / (1 - *a.threshold)) : 0.0);
  if (multi_label && !a.threshold && std::filesystem::exists(saved)) {
    const nlohmann::json d = io::read_json_file(saved);
    if (!d.contains("margins") || !d["margins"].is_array() ||
        d["margins"].size() != label_margins.size())
      throw InputError(
          fmt::format("{}: expected 'margins', one per label ({})", saved, label_margins.size()));
    label_margins = d["margins"].get<std::vector<double>>();
    spdlog::info(
        "multi-label decisions at the per-label thresholds training chose on validation "
        "({}; --threshold overrides)",
        saved);
  }
  if (!a.threshold && !regression && !multi_label && pred.config.num_labels() <= 2 &&
      std::filesystem::exists(saved)) {
    const nlohmann::json d = io::read_json_file(saved);
    threshold = io::get_float(d, "threshold", saved);
    saved_margin = io::get_float(d, "margin", saved);
    spdlog::info(
        "binary decisions at P(1) > {:.4f}, the threshold training chose on validation "
        "({}; --threshold overrides)",
        threshold, saved);
  }
  // P(class 1) > t  <=>  logit1 - logit0 > log(t / (1 - t)).
  const double margin = saved_margin     ? *saved_margin
                        : threshold >= 0 ? std::log(threshold / (1 - threshold))
                                         : 0;
  // Groups: each row's score (ranking_metrics.h row_score) and its rank in its group, 1 the
  // highest (equal scores in file order).
  const int64_t K = pred.config.num_labels();
  std::vector<int64_t> rank(groups.size(), 0);
  std::vector<double> scores(groups.size(), 0.0);
  if (!groups.empty()) {
    if (K > 2)
      throw InputError(fmt::format(
          "--group-field: ranking needs one score per row; {} has {} labels", a.model, K));
    std::map<std::string, std::vector<size_t>> members;
    for (size_t i = 0; i < groups.size(); ++i) {
      scores[i] = row_score(pred.logits[i].data(), K);
      members[groups[i]].push_back(i);
    }
    for (auto& [name, m] : members) {
      std::stable_sort(m.begin(), m.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
      for (size_t r = 0; r < m.size(); ++r) rank[m[r]] = static_cast<int64_t>(r + 1);
    }
  }
  io::AtomicFileWriter out(a.output);
  for (size_t row = 0; row < pred.logits.size(); ++row) {
    const std::vector<float>& logits = pred.logits[row];
    if (one_score) {
      // The score is the logit (as transformers and CrossEncoder give it); a BCE-trained score's
      // probability is sigmoid(score).
      nlohmann::json j;
      j["score"] = logits[0];
      if (!regression) {
        j["probability"] = 1.0 / (1.0 + std::exp(-double(logits[0])));
        if (saved_margin || threshold >= 0) j["decision"] = double(logits[0]) > margin;
      }
      j["logits"] = logits;
      if (!groups.empty()) {
        j["group"] = groups[row];
        j["rank"] = rank[row];
      }
      out.write(j.dump() + "\n");
      continue;
    }
    if (multi_label) {
      // One sigmoid per label; "labels": every label above its threshold.
      nlohmann::json j, probs = nlohmann::json::array(), labels = nlohmann::json::array();
      for (size_t c = 0; c < logits.size(); ++c) {
        probs.push_back(1.0 / (1.0 + std::exp(-double(logits[c]))));
        if (double(logits[c]) > label_margins[c]) labels.push_back(pred.config.id2label[c]);
      }
      j["logits"] = logits;
      j["probabilities"] = probs;
      j["labels"] = labels;
      out.write(j.dump() + "\n");
      continue;
    }
    const size_t best = threshold >= 0
                            ? size_t(double(logits[1]) - double(logits[0]) > margin)
                            : std::max_element(logits.begin(), logits.end()) - logits.begin();
    nlohmann::json j;
    j["logits"] = logits;
    j["label"] = pred.config.id2label[best];
    if (!groups.empty()) {
      j["group"] = groups[row];
      j["score"] = scores[row];
      j["rank"] = rank[row];
    }
    out.write(j.dump() + "\n");
  }
  out.commit();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("predicted {} rows in {:.2f} s ({:.1f} rows/s) -> {}", rows.size(), secs,
               rows.size() / secs, a.output);
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Logits and labels for every line of a JSONL file");
  cmd->add_option("--model", args->model, "Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--data", args->data, "JSONL input: input_ids/token_type_ids or text/text_pair")
      ->required();
  cmd->add_option("--output", args->output,
                  "JSONL output, one {\"logits\", \"label\"} per input line ({\"score\", "
                  "\"probability\", \"logits\"} for a one-score model)")
      ->required();
  cmd->add_option("--batch-size", args->batch_size, "Rows per forward pass")
      ->check(positive_integer());
  cmd->add_option("--max-length", args->max_length,
                  "Truncate text input to this many tokens, at most the model's positions "
                  "(default: the positions, bounded by the tokenizer's model_max_length)")
      ->check(positive_integer());
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N");
  cmd->add_option("--pair-template", args->pair_template,
                  "Format text pairs with this template, e.g. '<bos>{text}\\n{text_pair}<eos>' "
                  "(default: the one training saved in DIR/ftune.json, else the tokenizer's own "
                  "pairing)");
  cmd->add_option("--threshold", args->threshold,
                  "Binary: label 1 when its probability exceeds this, in (0, 1) (default: the "
                  "model's decision_threshold.json, written by training from validation data; "
                  "else argmax)")
      ->check(open_probability());
  cmd->add_option("--threads", args->threads, "Compute threads (default: all cores)")
      ->check(non_negative_integer());
  cmd->add_option("--group-field", args->group_field,
                  "Key of the query id: each output line also gets \"group\", its \"score\" "
                  "(logit[1] - logit[0], or the one logit) and its \"rank\" in the group (1: "
                  "highest)");
  cmd->add_option("--candidates", args->candidates,
                  "Causal LM: score these comma-separated completions of each row's prompt "
                  "(log-likelihood; \"prediction\": the most likely), e.g. \" yes, no\"");
  cmd->add_option("--candidates-field", args->candidates_field,
                  "Causal LM: each row's candidates, a list under this key");
  cmd->add_option("--prompt-field", args->prompt_field,
                  "Causal LM: the key of the prompt the candidates complete (default prompt)");
  cmd->callback([args] {
    if (args->candidates.empty() && args->candidates_field.empty()) return run(*args);
    run_candidate_predict(CandidateArgs{args->model, args->data, args->output, args->device,
                                        args->prompt_field,
                                        args->candidates.empty()
                                            ? std::vector<std::string>{}
                                            : split_commas(args->candidates),
                                        args->candidates_field, args->threads});
  });
}

}  // namespace ftune::cli
