// Reading, validating, splitting and tokenizing the datasets of a run (see train_data.h).
#include "train/train_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"

namespace ftune {
namespace {

TokenizedSplit tokenize_split(const std::string& name, const std::string& source,
                              const std::vector<data::RawExample>& raw, const text::Tokenizer& tok,
                              const data::LabelSet& labels, int64_t max_length,
                              nlohmann::json& report) {
  TokenizedSplit s{name, source, {}, 0};
  data::TokenizeStats stats;
  s.examples = data::tokenize_examples(tok, raw, labels, source, max_length, &stats);
  s.longest = stats.longest;
  report[name] = {{"source", source},
                  {"rows", s.examples.size()},
                  {"tokens", stats.tokens},
                  {"longest", stats.longest},
                  {"truncated", stats.truncated}};
  spdlog::info("{}: {} examples from {}, {:.1f} tokens on average, longest {}, {} truncated to {}",
               name, s.examples.size(), source,
               s.examples.empty() ? 0.0 : double(stats.tokens) / s.examples.size(), stats.longest,
               stats.truncated, max_length);
  return s;
}

}  // namespace

TrainData load_train_data(const TrainConfig& cfg, const text::Tokenizer& tok, int64_t max_length) {
  const data::ExampleFields fields{cfg.data.text_field, cfg.data.text_pair_field,
                                   cfg.data.label_field};
  TrainData d;
  const auto raw_train = data::read_examples(cfg.data.train, fields);
  d.files.push_back(cfg.data.train);
  d.labels = cfg.model.labels.empty() ? data::LabelSet::from_examples(raw_train)
                                      : data::LabelSet::from_names(cfg.model.labels);
  if (d.labels.names.size() < 2)
    throw InputError(
        fmt::format("{}: every example has the label '{}'; classification needs at least 2 labels",
                    cfg.data.train, d.labels.names.front()));
  d.train = tokenize_split("train", cfg.data.train, raw_train, tok, d.labels, max_length, d.report);
  if (!cfg.data.validation.empty()) {
    d.files.push_back(cfg.data.validation);
    d.validation = tokenize_split("validation", cfg.data.validation,
                                  data::read_examples(cfg.data.validation, fields), tok, d.labels,
                                  max_length, d.report);
  }
  if (!cfg.data.test.empty()) {
    d.files.push_back(cfg.data.test);
    d.test = tokenize_split("test", cfg.data.test, data::read_examples(cfg.data.test, fields), tok,
                            d.labels, max_length, d.report);
  }
  return d;
}

}  // namespace ftune
