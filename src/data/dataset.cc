// read_dataset: reader -> label ids -> bad-row policy -> report (see dataset.h).
#include "data/dataset.h"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <chrono>

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
  if (assign_group_ids(ds.examples) == 0) return {};
  const GroupStats s = group_stats(ds.examples, ds.label_ids, ds.labels);
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

BadRowPolicy parse_bad_row_policy(const std::string& value, const std::string& key) {
  if (value == "fail") return BadRowPolicy::kFail;
  if (value == "skip") return BadRowPolicy::kSkip;
  throw InputError(fmt::format("{}: expected fail or skip, got '{}'", key, value));
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
  if (spec.labels.empty()) ds.labels = LabelSet::from_examples(rows.examples, spec.path);
  ds.labels.integer_aliases = ds.labels.integer_aliases && spec.labels.integer_aliases;
  {
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
  for (int32_t id : ds.label_ids) ++report.class_counts[id];
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
  std::vector<TokenizedExample> out = tokenize_examples(
      tokenizer, dataset.examples, dataset.labels, dataset.path, max_length, &stats, pair_template);
  if (report) {
    report->tokenize = stats;
    report->tokenized = true;
  }
  return out;
}

}  // namespace ftune::data
