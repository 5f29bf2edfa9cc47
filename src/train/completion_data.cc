// The datasets of a causal-LM run (model.task causal_lm; see train_data.h load_completion_data):
// prompt -> completion rows read and tokenized by data/completions.h (TRL's completion-only
// recipe: the prompt masked, the completion and EOS learned), as TokenizedExamples whose
// token_labels carry the shifted next-token labels through batching, micro-batch cuts and input
// staging. Validation and test come from their files or a seeded random split of the training
// file (data.validation_split / data.test_split).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <numeric>

#include "core/error.h"
#include "data/completions.h"
#include "data/splits.h"
#include "train/train_data.h"

namespace ftune {
namespace {

struct ReadSplit {
  std::vector<data::TokenizedExample> examples;
  nlohmann::json report;
};

ReadSplit read_split(const TrainConfig& cfg, const text::Tokenizer& tok, const std::string& path,
                     int32_t eos, int64_t max_length) {
  const data::CompletionFields fields{cfg.data.prompt_field, cfg.data.completion_field};
  const std::vector<data::CompletionExample> rows =
      data::read_completions(path, cfg.data.format, cfg.data.has_header, fields);
  ReadSplit out;
  int64_t tokens = 0, counted = 0, cut = 0;
  for (const data::CompletionExample& row : rows) {
    data::TokenizedCompletion t = data::tokenize_completion(
        tok, row, eos, max_length, path, {cfg.data.add_special_tokens, cfg.data.append_eos});
    data::TokenizedExample e;
    e.input_ids = std::move(t.input_ids);
    e.token_labels = std::move(t.token_labels);
    e.label = -100;  // no row label: the loss is on the token labels
    if (static_cast<int64_t>(e.input_ids.size()) == max_length) ++cut;
    tokens += static_cast<int64_t>(e.input_ids.size());
    for (const int32_t l : e.token_labels) counted += l >= 0 ? 1 : 0;
    out.examples.push_back(std::move(e));
  }
  out.report = {{"rows", rows.size()},
                {"tokens", tokens},
                {"completion_tokens", counted},
                {"rows_at_max_length", cut}};
  spdlog::info("{}: {} prompt -> completion rows, {} tokens, {} of them learned (completion{}){}",
               path, rows.size(), tokens, counted, cfg.data.append_eos ? " and EOS" : "",
               cut > 0 ? fmt::format("; {} rows reach max_length {} (cut at the end)", cut,
                                     max_length)
                       : "");
  return out;
}

std::vector<data::TokenizedExample> pick(const std::vector<data::TokenizedExample>& all,
                                         const std::vector<int64_t>& indices) {
  std::vector<data::TokenizedExample> out;
  for (const int64_t i : indices) out.push_back(all[i]);
  return out;
}

}  // namespace

TrainData load_completion_data(const TrainConfig& cfg, const text::Tokenizer& tok,
                               int64_t max_length) {
  const auto& d = cfg.data;
  TrainData out;
  out.task.causal_lm = true;
  out.task.loss_name = "causal_lm";
  const int32_t eos = data::completion_eos_id(cfg.model.path, "key 'model.path'");
  ReadSplit train = read_split(cfg, tok, d.train, eos, max_length);
  out.files.push_back(d.train);
  out.report["train_file"] = train.report;
  if (d.validation_split > 0 || d.test_split > 0) {
    // A seeded random split: every row has the one "class".
    const std::vector<int32_t> one_class(train.examples.size(), 0);
    const data::SplitIndices parts =
        data::stratified_split(one_class, d.validation_split, d.test_split, cfg.training.seed);
    const std::string what = fmt::format("{} (random split)", d.train);
    if (!parts.validation.empty())
      out.validation =
          make_split("validation", what, pick(train.examples, parts.validation), max_length);
    if (!parts.test.empty())
      out.test = make_split("test", what, pick(train.examples, parts.test), max_length);
    out.train = make_split("train", what, pick(train.examples, parts.train), max_length);
  } else {
    out.train = make_split("train", d.train, std::move(train.examples), max_length);
  }
  auto read_other = [&](const std::string& path, const char* name) {
    ReadSplit s = read_split(cfg, tok, path, eos, max_length);
    out.files.push_back(path);
    out.report[std::string(name) + "_file"] = s.report;
    return make_split(name, path, std::move(s.examples), max_length);
  };
  if (!d.validation.empty()) out.validation = read_other(d.validation, "validation");
  if (!d.test.empty()) out.test = read_other(d.test, "test");
  return out;
}

}  // namespace ftune
