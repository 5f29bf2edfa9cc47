// read_dataset: reader -> label ids -> bad-row policy -> report (see dataset.h).
#include "data/dataset.h"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "data/groups.h"

namespace ftune::data {
namespace {

using Clock = std::chrono::steady_clock;

std::string listing(const std::string& path, const std::vector<BadRow>& bad) {
  std::string s;
  for (int64_t i = 0; i < static_cast<int64_t>(bad.size()) && i < kListedBadRows; ++i)
    s += fmt::format("\n  {}:{}: {}", path, bad[i].line, bad[i].reason);
  if (static_cast<int64_t>(bad.size()) > kListedBadRows)
    s += fmt::format("\n  ... and {} more", bad.size() - kListedBadRows);
  return s;
}

// Dense group ids, and the groups without a relevant row: warned about (ranking metrics and the
// listwise loss skip them) or refused.
GroupStats check_groups(const DataSpec& spec, RawDataset& ds) {
  const bool grouped = assign_group_ids(ds.examples) > 0;
  // Each row's relevance (DataSpec::top_target_relevant).
  const size_t n = ds.examples.size();
  if (spec.targets == ScoreTargets::kLabels) {
    ds.relevance.resize(n);
    for (size_t i = 0; i < n; ++i) ds.relevance[i] = relevance_of(ds.labels, ds.label_ids[i]);
  } else if (spec.targets == ScoreTargets::kUnitScores) {
    ds.relevance = ds.targets;
  } else if (spec.targets == ScoreTargets::kScores && spec.top_target_relevant) {
    ds.relevance = top_target_relevance(ds.examples, ds.targets);
  } else {
    ds.relevance.assign(n, 0.0f);
  }
  if (!grouped) return {};
  const GroupStats s = group_stats(ds.examples, ds.relevance);
  if (s.without_positive > 0) {
    const std::string what = fmt::format(
        "{}:{}: {} of {} query groups have no relevant row (the first is the group of this line)",
        spec.path, s.first_without_positive_line, s.without_positive, s.groups);
    if (spec.refuse_groups_without_positive)
      throw InputError(what + " (data.groups_without_positive is fail)");
    spdlog::warn("{}; ranking metrics and the listwise loss skip them "
                 "(data.groups_without_positive: fail refuses them)",
                 what);
  }
  return s;
}

}  // namespace

std::optional<float> score_target(const std::string& text, ScoreTargets kind,
                                  const std::string& key, std::string* problem) {
  // The whole text must be a decimal number (strtod would also take "0x1p3", "inf" or "nan":
  // refused by the checks below, the hexadecimal by the character set).
  const bool plain =
      !text.empty() && text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  char* end = nullptr;
  const double v = plain ? std::strtod(text.c_str(), &end) : 0.0;
  if (!plain || end != text.c_str() + text.size()) {
    *problem = fmt::format("score '{}' is not a number", text);
    return std::nullopt;
  }
  if (!std::isfinite(v) || std::fabs(v) > FLT_MAX) {
    *problem = fmt::format("score '{}' is not a finite number", text);
    return std::nullopt;
  }
  if (kind == ScoreTargets::kUnitScores && !(v >= 0.0 && v <= 1.0)) {
    // A one-score head trained listwise reads 0/1 relevance too (train/score_task.h).
    const bool listwise = key.find("listwise") != std::string::npos;
    *problem = fmt::format(
        "target {} is outside [0, 1] ({}{}: 0/1 relevance or a soft target; {})", text,
        listwise ? "" : "binary cross-entropy, ", key,
        listwise ? "a one-score head ranks on 0/1 relevance, graded labels serve the ranking "
                   "metrics only"
                 : "use mse for unbounded scores");
    return std::nullopt;
  }
  return static_cast<float>(v);
}

BadRowPolicy parse_bad_row_policy(const std::string& value, const std::string& key) {
  if (auto policy = find_choice(kBadRowPolicyNames, value)) return *policy;
  throw InputError(fmt::format("{}: expected {}, got '{}'", key,
                               either(choice_words(kBadRowPolicyNames)), value));
}

nlohmann::json DatasetReport::to_json() const {
  nlohmann::json j = {{"path", path},
                      {"format", format},
                      {"rows", rows},
                      {"examples", examples},
                      {"skipped", skipped},
                      {"class_counts", class_counts},
                      {"read_seconds", read_seconds}};
  if (groups > 0) {
    j["groups"] = groups;
    j["groups_without_positive"] = groups_without_positive;
  }
  nlohmann::json rows_json = nlohmann::json::array();
  for (const BadRow& b : skipped_rows)
    rows_json.push_back({{"line", b.line}, {"reason", b.reason}});
  j["skipped_rows"] = std::move(rows_json);
  if (tokenized) {
    j["tokens"] = tokenize.tokens;
    j["truncated"] = tokenize.truncated;
    j["longest"] = tokenize.longest;
    j["tokenize_seconds"] = tokenize.seconds;
    j["tokens_per_second"] = tokenize.tokens_per_second();
  }
  return j;
}

DatasetReport read_dataset(const DataSpec& spec, RawDataset* out) {
  const auto t0 = Clock::now();
  if (!(spec.max_bad_fraction >= 0 && spec.max_bad_fraction <= 1))
    throw InputError(
        fmt::format("data.max_bad_fraction: expected 0..1, got {}", spec.max_bad_fraction));
  const DataFormat format =
      spec.format == DataFormat::kAuto ? data_format_for_path(spec.path) : spec.format;
  ReadRows rows = read_rows(spec.path, format, spec.has_header, spec.columns);

  // Labels: an explicit set makes labels outside it bad rows; otherwise the set is the data's.
  RawDataset ds;
  ds.path = spec.path;
  std::vector<BadRow> bad = std::move(rows.bad);
  if (!spec.labels.names.empty() && !spec.labels.ids.empty())
    throw InputError(
        fmt::format("{}: give the label names as a list or as a map, not both", spec.labels_key));
  if (!spec.labels.names.empty()) {
    ds.labels = LabelSet::from_names(spec.labels.names, spec.labels_key);
  } else if (!spec.labels.ids.empty()) {
    ds.labels = LabelSet::from_map(spec.labels.ids, spec.labels_key);
  }
  // Without an explicit set the set is the data's (examples.h: every label a name). A label that
  // an explicit set cannot address is a bad row.
  if (spec.labels.empty() && spec.targets == ScoreTargets::kLabels)
    ds.labels = LabelSet::from_examples(rows.examples, spec.path);
  ds.labels.integer_aliases = ds.labels.integer_aliases && spec.labels.integer_aliases;
  if (spec.targets == ScoreTargets::kLabelLists) {
    if (spec.labels.empty()) {
      // The data's labels: every label any row lists, each once, ordered as a label set is.
      std::vector<RawExample> named;
      for (const RawExample& e : rows.examples)
        for (const std::string& l : e.label_list)
          named.push_back(RawExample{"", {}, l, {}, e.line});
      if (named.empty())
        throw InputError(fmt::format("{}: no row lists any label (multi-label)", spec.path));
      ds.labels = LabelSet::from_examples(named, spec.path);
      ds.labels.integer_aliases = false;
    }
    const size_t K = ds.labels.names.size();
    std::vector<RawExample> kept;
    kept.reserve(rows.examples.size());
    const size_t bad_before = bad.size();
    for (RawExample& e : rows.examples) {
      std::vector<float> hot(K, 0.0f);
      std::string problem;
      for (const std::string& l : e.label_list) {
        const std::optional<int32_t> id = ds.labels.find(l);
        if (!id) {
          problem = fmt::format("label '{}' is not one of the {} labels ({})", l, K,
                                ds.labels.describe());
          break;
        }
        hot[*id] = 1.0f;
      }
      if (!problem.empty()) {
        bad.push_back({e.line, std::move(problem)});
        continue;
      }
      ds.targets.insert(ds.targets.end(), hot.begin(), hot.end());
      ds.label_ids.push_back(0);
      kept.push_back(std::move(e));
    }
    rows.examples = std::move(kept);
    if (bad.size() > bad_before)
      std::stable_sort(bad.begin(), bad.end(),
                       [](const BadRow& a, const BadRow& b) { return a.line < b.line; });
  } else if (spec.targets != ScoreTargets::kLabels) {
    // A score task: the label set is the model's own (one name); the column holds float targets.
    ds.labels = LabelSet::from_names(
        spec.labels.names.empty() ? std::vector<std::string>{"LABEL_0"} : spec.labels.names,
        spec.labels_key);
    std::vector<RawExample> kept;
    kept.reserve(rows.examples.size());
    const size_t bad_before = bad.size();
    for (RawExample& e : rows.examples) {
      std::string problem;
      const std::optional<float> t =
          score_target(e.label, spec.targets, spec.targets_key, &problem);
      if (!t) {
        bad.push_back({e.line, std::move(problem)});
        continue;
      }
      ds.targets.push_back(*t);
      ds.label_ids.push_back(0);
      kept.push_back(std::move(e));
    }
    rows.examples = std::move(kept);
    if (bad.size() > bad_before)
      std::stable_sort(bad.begin(), bad.end(),
                       [](const BadRow& a, const BadRow& b) { return a.line < b.line; });
  } else {
    std::vector<RawExample> kept;
    kept.reserve(rows.examples.size());
    const size_t bad_before = bad.size();
    for (RawExample& e : rows.examples) {
      const std::optional<int32_t> id = ds.labels.find(e.label);
      if (!id) {
        bad.push_back({e.line, fmt::format("label '{}' is not one of the {} labels ({})", e.label,
                                           ds.labels.names.size(), ds.labels.describe())});
        continue;
      }
      ds.label_ids.push_back(*id);
      kept.push_back(std::move(e));
    }
    rows.examples = std::move(kept);
    if (bad.size() > bad_before)
      std::stable_sort(bad.begin(), bad.end(),
                       [](const BadRow& a, const BadRow& b) { return a.line < b.line; });
  }

  // Policy.
  const int64_t n_bad = static_cast<int64_t>(bad.size());
  if (n_bad > 0) {
    if (spec.bad_rows == BadRowPolicy::kFail)
      throw InputError(fmt::format("{}: {} of {} rows are bad (data.bad_rows is fail):{}",
                                   spec.path, n_bad, rows.rows, listing(spec.path, bad)));
    const double fraction = double(n_bad) / double(rows.rows);
    if (fraction > spec.max_bad_fraction)
      throw InputError(fmt::format(
          "{}: {} of {} rows are bad ({:.2f}%), over data.max_bad_fraction {:g} ({:.2f}%):{}",
          spec.path, n_bad, rows.rows, 100 * fraction, spec.max_bad_fraction,
          100 * spec.max_bad_fraction, listing(spec.path, bad)));
  }
  if (rows.examples.empty()) throw InputError(fmt::format("{}: no examples", spec.path));
  ds.examples = std::move(rows.examples);
  const GroupStats groups = check_groups(spec, ds);

  DatasetReport report;
  report.path = spec.path;
  report.format = data_format_name(format);
  report.rows = rows.rows;
  report.examples = static_cast<int64_t>(ds.examples.size());
  report.skipped = n_bad;
  bad.resize(std::min<int64_t>(n_bad, kKeptBadRows));
  report.skipped_rows = std::move(bad);
  report.class_counts.assign(ds.labels.names.size(), 0);
  if (spec.targets == ScoreTargets::kLabelLists) {
    // Rows listing each label.
    const size_t K = ds.labels.names.size();
    for (size_t i = 0; i < ds.targets.size(); ++i) report.class_counts[i % K] += ds.targets[i] > 0;
  } else {
    for (int32_t id : ds.label_ids) ++report.class_counts[id];
  }
  report.groups = groups.groups;
  report.groups_without_positive = groups.without_positive;
  report.read_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  *out = std::move(ds);
  return report;
}

std::vector<TokenizedExample> tokenize_dataset(const text::Tokenizer& tokenizer,
                                               const RawDataset& dataset, int64_t max_length,
                                               DatasetReport* report,
                                               const text::PairTemplate* pair_template) {
  TokenizeStats stats;
  const bool scores = !dataset.targets.empty();
  std::vector<TokenizedExample> out =
      tokenize_examples(tokenizer, dataset.examples, dataset.labels, dataset.path, max_length,
                        &stats, pair_template, scores ? &dataset.label_ids : nullptr);
  if (scores) {
    const size_t w = dataset.targets.size() / dataset.examples.size();
    for (size_t i = 0; i < out.size(); ++i)
      out[i].targets.assign(dataset.targets.begin() + i * w, dataset.targets.begin() + (i + 1) * w);
  }
  if (dataset.relevance.size() == out.size())
    for (size_t i = 0; i < out.size(); ++i) out[i].relevance = dataset.relevance[i];
  if (report) {
    report->tokenize = stats;
    report->tokenized = true;
  }
  return out;
}

}  // namespace ftune::data
