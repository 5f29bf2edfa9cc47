// `ftune eval --model DIR --data FILE [--threshold P] [--output FILE.json]`: evaluates a trained
// classifier on labelled data (JSONL, TSV or CSV, read and validated like training data) and prints
// the metrics as JSON: loss, accuracy, precision / recall / F1 (binary and macro), MCC, ROC-AUC
// and average precision for binary tasks, the confusion matrix — and, for binary models, the
// metrics at a decision threshold ("at_threshold"): --threshold, else the one training chose on
// validation data (DIR/decision_threshold.json). Text pairs are formatted as training formatted
// them: --pair-template, else DIR/ftune.json's template, else the tokenizer's own pairing.
// A one-score model (num_labels 1) reads the label column as float targets: a regression model
// (problem_type regression) gets MSE, MAE, Pearson and Spearman; any other one-score model
// (a BCE-trained reranker) gets the binary metrics of s = its score against [target >= 0.5], with
// targets in [0, 1] and binary cross-entropy as the loss. For a classifier, JSONL rows of token
// ids ({"input_ids": [...], "token_type_ids": [...], "label": ...}) are read as `ftune predict`
// reads them, without a tokenizer. Logits that are not finite are an error naming the row;
// --output may not be (or lie inside) --data or --model. A causal LM (config.json names a
// *ForCausalLM) is evaluated on prompt -> completion rows instead: loss per token, perplexity
// (cli/eval_causal_lm.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/eval_causal_lm.h"
#include "core/device.h"
#include "core/thread_pool.h"
#include "data/dataset.h"
#include "data/jsonl.h"
#include "io/json_file.h"
#include "io/path_guard.h"
#include "io/signal_cleanup.h"
#include "models/hf_checkpoint.h"
#include "models/input_limits.h"
#include "models/predictor.h"
#include "train/metrics.h"
#include "train/multilabel_metrics.h"
#include "train/regression_metrics.h"
#include "train/ranking_metrics.h"

namespace ftune::cli {
namespace {

struct EvalArgs {
  std::string model, data, output, format = "auto";
  std::string text_field = "text", text_pair_field = "text_pair", label_field = "label";
  std::string group_field;  // query id column: ranking metrics per group
  std::string label_separator = "|";  // multi-label TSV / CSV
  std::string prompt_field = "prompt", completion_field = "completion";  // causal LM
  bool rendered_chat = false;                                            // causal LM
  std::string pair_template;  // empty: DIR/ftune.json's, else tokenizer(text, text_pair)
  bool no_header = false;
  int64_t batch_size = 64, max_length = 0;
  double threshold = 0;
  bool has_threshold = false, has_max_length = false;
  int threads = 0;
};

// Whether `path` holds pre-tokenized JSONL rows ({"input_ids": [...], "label": ...}), as
// `ftune predict` reads them: its first object has input_ids.
bool pretokenized_jsonl(const std::string& path, const std::string& format) {
  const bool jsonl = format == "jsonl" ||
                     (format == "auto" && std::filesystem::path(path).extension() == ".jsonl");
  if (!jsonl) return false;
  struct FirstObjectRead {};
  bool tokenized = false;
  try {
    data::for_each_jsonl_object(path, [&](const nlohmann::json& obj, int64_t) {
      tokenized = obj.contains("input_ids");
      throw FirstObjectRead{};  // no need to read on
    });
  } catch (const FirstObjectRead&) {
  }
  return tokenized;
}

// Pre-tokenized labelled rows: input_ids (token_type_ids optional) and the label (a name of
// `labels`, or its id); no tokenizer is needed. Every row must have input_ids.
std::vector<data::TokenizedExample> read_pretokenized(const std::string& path,
                                                      const std::string& label_field,
                                                      const data::LabelSet& labels,
                                                      data::DatasetReport* report,
                                                      std::vector<int64_t>* lines) {
  std::vector<data::TokenizedExample> rows;
  report->path = path;
  report->format = "jsonl";
  report->class_counts.assign(labels.names.size(), 0);
  data::for_each_jsonl_object(path, [&](const nlohmann::json& obj, int64_t line) {
    if (!obj.contains("input_ids"))
      throw InputError(
          fmt::format("{}:{}: expected 'input_ids' (the file's first row has them)", path, line));
    data::TokenizedExample row;
    row.input_ids = data::jsonl_token_ids(obj["input_ids"], "input_ids", path, line);
    if (obj.contains("token_type_ids"))
      row.token_type_ids =
          data::jsonl_token_ids(obj["token_type_ids"], "token_type_ids", path, line);
    const nlohmann::json& l = data::jsonl_field(obj, label_field.c_str(), path, line);
    data::RawExample raw;
    raw.line = line;
    if (l.is_string())
      raw.label = l.get<std::string>();
    else if (l.is_number_integer())
      raw.label = std::to_string(l.get<int64_t>());
    else
      throw InputError(
          fmt::format("{}:{}: '{}' must be a string or an integer", path, line, label_field));
    row.label = labels.id(raw, path);
    ++report->class_counts[static_cast<size_t>(row.label)];
    rows.push_back(std::move(row));
    lines->push_back(line);
  });
  report->rows = report->examples = static_cast<int64_t>(rows.size());
  if (rows.empty()) throw InputError(fmt::format("{}: no rows", path));
  return rows;
}

void run(const EvalArgs& a) {
  if (!a.output.empty())
    io::refuse_output_over_inputs({"--output", a.output},
                                  {{"--data", a.data}, {"--model", a.model}}, false);
  io::remove_temporaries_on_signals();
  if (a.threads > 0) set_compute_threads(a.threads);
  const ModelSpec model_spec = load_model_spec(a.model);
  const ModelInfo& config = model_spec.info();
  const int64_t K = config.num_labels();
  const bool regression = K == 1 && model_spec.problem_type() == "regression";
  if (a.has_threshold &&
      ((K > 2 && model_spec.problem_type() != "multi_label_classification") || regression))
    throw InputError(
        fmt::format("--threshold applies to binary models; {} has {} labels", a.model, K));
  const std::string labels_key = fmt::format("{}/config.json id2label", a.model);
  const bool multi_label = K > 1 && model_spec.problem_type() == "multi_label_classification";
  data::DatasetReport report;
  std::vector<data::TokenizedExample> rows;
  std::vector<int64_t> lines;  // each row's line in --data
  if (K > 1 && !multi_label && pretokenized_jsonl(a.data, a.format)) {
    // Token ids as `ftune predict` reads them: no tokenizer.json needed.
    rows =
        read_pretokenized(a.data, a.label_field,
                          data::LabelSet::from_names(config.id2label, labels_key), &report, &lines);
  } else {
    const std::optional<text::PairTemplate> tmpl =
        text::resolve_pair_template(a.pair_template, "--pair-template", a.model);
    const text::Tokenizer tok = text::Tokenizer::from_dir(a.model);
    check_tokenizer_vocabulary(tok, config, a.model);
    const int64_t max_length = inference_max_length(
        config, tok, a.has_max_length ? std::optional<int64_t>(a.max_length) : std::nullopt,
        a.model, "--max-length");
    data::DataSpec spec;
    spec.path = a.data;
    spec.format = data::parse_data_format(a.format, "--format");
    spec.has_header = !a.no_header;
    spec.columns.text = a.text_field;
    spec.columns.text_pair = a.text_pair_field;
    spec.columns.label = a.label_field;
    spec.columns.group = a.group_field;
    spec.labels.names = config.id2label;
    spec.labels_key = labels_key;
    if (multi_label) {
      spec.columns.label_lists = true;
      spec.columns.list_separator = a.label_separator;
      spec.targets = data::ScoreTargets::kLabelLists;
    }
    if (K == 1) {
      spec.columns.numeric_label = true;
      spec.targets = regression ? data::ScoreTargets::kScores : data::ScoreTargets::kUnitScores;
      spec.targets_key = fmt::format("the one-score model {}", a.model);
    }
    data::RawDataset raw;
    report = data::read_dataset(spec, &raw);
    rows = data::tokenize_dataset(tok, raw, max_length, &report, tmpl ? &*tmpl : nullptr);
    for (const data::RawExample& e : raw.examples) lines.push_back(e.line);
  }
  const Predictions p = predict_logits(a.model, rows, a.batch_size, Device::cpu());
  // Logits that are not finite make every metric meaningless (NaN picks class 0): an error.
  for (size_t i = 0; i < rows.size(); ++i)
    for (float v : p.logits[i])
      if (!std::isfinite(v))
        throw InputError(fmt::format(
            "{}:{}: the logits of this row are not finite ([{}]): {} computes NaN or infinite "
            "values on it; no metrics reported",
            a.data, i < lines.size() ? lines[i] : int64_t(i + 1), fmt::join(p.logits[i], ", "),
            a.model));
  if (multi_label) {
    MultiLabelMetrics ml(config.id2label);
    double loss_sum = 0;  // mean BCE over every (row, label), as training reports it
    for (size_t i = 0; i < rows.size(); ++i) {
      ml.add(p.logits[i].data(), rows[i].targets.data());
      for (int64_t c = 0; c < K; ++c) {
        const double z = p.logits[i][c], t = rows[i].targets[c];
        loss_sum += (std::max(z, 0.0) - z * t + std::log1p(std::exp(-std::fabs(z)))) / double(K);
      }
    }
    ml.add_loss(loss_sum, static_cast<int64_t>(rows.size()));
    std::vector<double> margins(static_cast<size_t>(K),
                                a.has_threshold ? std::log(a.threshold / (1 - a.threshold)) : 0.0);
    const std::string saved = (std::filesystem::path(a.model) / "decision_threshold.json").string();
    const bool chosen = !a.has_threshold && std::filesystem::exists(saved);
    if (chosen) margins = io::read_json_file(saved).at("margins").get<std::vector<double>>();
    nlohmann::json j = a.has_threshold || chosen ? ml.to_json_with(margins) : ml.to_json(margins);
    j["data"] = report.to_json();
    j["model"] = a.model;
    if (!a.output.empty()) io::write_json_atomic(a.output, j);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (regression) {
    RegressionMetrics r;
    double loss_sum = 0;  // mean squared error, as training reports it
    for (size_t i = 0; i < rows.size(); ++i) {
      const double d = double(p.logits[i][0]) - double(rows[i].targets[0]);
      loss_sum += d * d;
      r.add(p.logits[i][0], rows[i].targets[0]);
    }
    r.add_loss(loss_sum, static_cast<int64_t>(rows.size()));
    nlohmann::json j = r.to_json();
    j["data"] = report.to_json();
    j["model"] = a.model;
    if (!a.output.empty()) io::write_json_atomic(a.output, j);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  ClassificationMetrics m(K == 1 ? 2 : K, EvalSplit::Test);
  double loss_sum = 0;  // mean cross-entropy (binary for one score), as training reports it
  for (size_t i = 0; i < rows.size() && K == 1; ++i) {
    const double z = p.logits[i][0], t = rows[i].targets[0];
    const float pair[2] = {0.0f, p.logits[i][0]};
    m.add(pair, t >= 0.5 ? 1 : 0);
    loss_sum += std::max(z, 0.0) - z * t + std::log1p(std::exp(-std::fabs(z)));
  }
  for (size_t i = 0; i < rows.size() && K > 1; ++i) {
    const std::vector<float>& z = p.logits[i];
    m.add(z.data(), rows[i].label);
    const double zmax = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (float v : z) sum += std::exp(double(v) - zmax);
    loss_sum += zmax + std::log(sum) - z[rows[i].label];
  }
  m.add_loss(loss_sum, static_cast<int64_t>(rows.size()));
  nlohmann::json j;
  const std::string saved = (std::filesystem::path(a.model) / "decision_threshold.json").string();
  if (a.has_threshold) {
    j = m.to_json(ClassificationMetrics::threshold_at_probability(a.threshold));
  } else if (K <= 2 && std::filesystem::exists(saved)) {
    // The exact histogram edge training chose on validation data.
    const nlohmann::json d = io::read_json_file(saved);
    j = m.to_json(BinaryThreshold{
        io::get_float(d, "margin", saved), io::get_float(d, "threshold", saved),
        io::get_string(d, "chosen_by", saved), io::get_float(d, "validation_value", saved)});
  } else {
    j = m.to_json();
  }
  // Query groups (--group-field, or FlagEmbedding's nested rows): ranking metrics over them.
  if (report.groups > 0) {
    if (K > 2)
      throw InputError(fmt::format(
          "{}: the rows have query groups, but {} has {} labels: ranking needs one score per "
          "row (1 or 2 labels)",
          a.data, a.model, K));
    RankingMetrics ranking;
    for (size_t i = 0; i < rows.size(); ++i)
      ranking.add(rows[i].group, rows[i].relevance, row_score(p.logits[i].data(), K));
    add_ranking_metrics(j, ranking, "");
  }
  j["data"] = report.to_json();
  j["model"] = a.model;
  if (!a.output.empty()) io::write_json_atomic(a.output, j);
  std::printf("%s\n", j.dump(2).c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Evaluate a trained classifier on labelled data, or a causal LM on prompt -> completion rows");
  cmd->add_option("--model", a->model, "Model directory (HF format; tokenizer.json for text rows)")
      ->required();
  cmd->add_option("--data", a->data, "Labelled data: .jsonl, .tsv or .csv")->required();
  cmd->add_option("--output", a->output, "Also write the metrics JSON here (atomically)");
  CLI::Option* threshold =
      cmd->add_option("--threshold", a->threshold,
                      "Binary: decide class 1 when its probability exceeds this (in (0, 1))")
          ->check(open_probability());
  cmd->add_option("--format", a->format, "auto (by extension), jsonl, tsv or csv");
  cmd->add_option("--text-field", a->text_field, "Column / key of the first text");
  cmd->add_option("--text-pair-field", a->text_pair_field, "Column / key of the second text");
  cmd->add_option("--label-field", a->label_field, "Column / key of the label");
  cmd->add_option("--group-field", a->group_field,
                  "Column / key of the query id: ranking metrics (ndcg@k, mrr@10, map, recall@k, "
                  "group_accuracy) over each query's rows");
  cmd->add_option("--label-separator", a->label_separator,
                  "Multi-label TSV / CSV: what joins a row's labels in its label field");
  cmd->add_flag("--no-header", a->no_header, "TSV/CSV without a header row");
  cmd->add_option("--pair-template", a->pair_template,
                  "Format text pairs with this template, e.g. '<bos>{text}\\n{text_pair}<eos>' "
                  "(default: the one training saved in DIR/ftune.json, else the tokenizer's own "
                  "pairing)");
  cmd->add_option("--batch-size", a->batch_size, "Rows per batch")->check(positive_integer());
  CLI::Option* max_length =
      cmd->add_option("--max-length", a->max_length,
                      "Tokens per input, at most the model's positions (default: the model's)")
          ->check(positive_integer());
  cmd->add_option("--threads", a->threads, "Compute threads (default: all cores)")
      ->check(non_negative_integer());
  CLI::Option* prompt_field = cmd->add_option(
      "--prompt-field", a->prompt_field, "Causal LM: the key / column of the prompt (default prompt)");
  CLI::Option* completion_field =
      cmd->add_option("--completion-field", a->completion_field,
                      "Causal LM: the key / column of the completion (default completion)");
  CLI::Option* rendered_chat = cmd->add_flag(
      "--rendered-chat", a->rendered_chat,
      "Causal LM: rows a chat template rendered (python -m ftune.chat): no special tokens added, "
      "no EOS appended (training's data.add_special_tokens / data.append_eos false)");
  // Options of one kind of model only, refused (named) with the other.
  const std::vector<CLI::Option*> classifier_only = {
      threshold,
      cmd->get_option("--text-field"),
      cmd->get_option("--text-pair-field"),
      cmd->get_option("--label-field"),
      cmd->get_option("--group-field"),
      cmd->get_option("--label-separator"),
      cmd->get_option("--pair-template")};
  cmd->callback([a, threshold, max_length, prompt_field, completion_field, rendered_chat,
                 classifier_only] {
    a->has_threshold = threshold->count() > 0;
    a->has_max_length = max_length->count() > 0;
    if (causal_lm_checkpoint(a->model)) {
      for (const CLI::Option* o : classifier_only)
        if (o->count() > 0)
          throw InputError(fmt::format("{} applies to classifiers; {} is a causal LM (evaluated "
                                       "on prompt -> completion rows: --prompt-field, "
                                       "--completion-field)",
                                       o->get_name(), a->model));
      CausalLmEvalArgs c;
      c.model = a->model;
      c.data = a->data;
      c.output = a->output;
      c.format = a->format;
      c.prompt_field = a->prompt_field;
      c.completion_field = a->completion_field;
      c.rendered_chat = a->rendered_chat;
      c.no_header = a->no_header;
      c.batch_size = a->batch_size;
      c.max_length = a->has_max_length ? a->max_length : 0;
      c.threads = a->threads;
      run_causal_lm_eval(c);
      return;
    }
    for (const CLI::Option* o : {prompt_field, completion_field, rendered_chat})
      if (o->count() > 0)
        throw InputError(fmt::format("{} applies to causal LMs (config.json architectures "
                                     "*ForCausalLM); {} is not one",
                                     o->get_name(), a->model));
    run(*a);
  });
}

}  // namespace ftune::cli
