// JSONL, TSV and CSV readers: one RawExample or one BadRow per data row (see readers.h).
#include "data/readers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "data/delimited.h"
#include "data/groups.h"
#include "data/jsonl.h"
#include "data/memory_source.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "text/utf8.h"

namespace ftune::data {
namespace {

// Why `value` cannot be the field `name` of an example, or "" when it can.
std::string text_problem(std::string_view value, std::string_view name) {
  const size_t bad = text::utf8_find_invalid(value);
  if (bad != std::string_view::npos)
    return fmt::format("invalid UTF-8 in '{}' at byte {}", name, bad + 1);
  if (blank_text(value)) return fmt::format("empty '{}'", name);
  return "";
}

// The query id of a JSONL row: a non-empty string or an integer (its decimal form).
std::string group_problem(const nlohmann::json& obj, const std::string& key, std::string* to) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fmt::format("missing '{}' (data.group_field)", key);
  if (it->is_number_integer()) {
    *to = std::to_string(it->get<int64_t>());
    return "";
  }
  if (it->is_string() && !blank_text(it->get_ref<const std::string&>())) {
    *to = it->get<std::string>();
    return "";
  }
  return fmt::format("'{}' (data.group_field) must be a non-empty string or an integer, got {}",
                     key, io::json_type_name(*it));
}

void read_jsonl(std::string_view content, const ColumnMap& c, ReadRows* out) {
  auto bad_line = [&](int64_t line, std::string reason) {
    out->bad.push_back({line, std::move(reason)});
  };
  scan_jsonl_rows(content, &out->rows, bad_line, [&](const nlohmann::json& obj, int64_t number) {
    auto bad = [&](std::string reason) { bad_line(number, std::move(reason)); };
    RawExample e;
    e.line = number;
    auto text_field = [&](const std::string& key, bool optional, std::optional<std::string>* to) {
      auto it = obj.find(key);
      if (it == obj.end() || it->is_null()) {
        if (optional) return std::string();
        return fmt::format("missing '{}'", key);
      }
      if (!it->is_string())
        return fmt::format("'{}' must be a string, got {}", key, io::json_type_name(*it));
      std::string problem = text_problem(it->get_ref<const std::string&>(), key);
      if (problem.empty()) *to = it->get<std::string>();
      return problem;
    };
    std::optional<std::string> text;
    std::string problem = text_field(c.text, false, &text);
    if (problem.empty()) problem = text_field(c.text_pair, true, &e.text_pair);
    if (problem.empty()) {
      auto it = obj.find(c.label);
      if (it == obj.end() || it->is_null())
        problem = fmt::format("missing '{}'", c.label);
      else if (it->is_number_integer() && !c.label_lists)
        e.label = std::to_string(it->get<int64_t>());
      else if (c.numeric_label && it->is_number())
        e.label = it->dump();  // the shortest text that reads back as the same double
      else if (c.label_lists && it->is_array()) {
        for (const auto& v : *it) {
          if (v.is_number_integer()) {
            e.label_list.push_back(std::to_string(v.get<int64_t>()));
          } else if (v.is_string() && !v.get_ref<const std::string&>().empty()) {
            e.label_list.push_back(v.get<std::string>());
          } else {
            problem = fmt::format("'{}' must list labels (strings or integers), found {}", c.label,
                                  v.dump());
            break;
          }
        }
      } else if (c.label_lists)
        problem = fmt::format("'{}' must be a list of labels (multi-label), got {}", c.label,
                              io::json_type_name(*it));
      else if (it->is_array())
        problem = fmt::format(
            "'{}' is a list of labels, but the task has one label per row (multi-label: "
            "training.loss multi_label_bce, or a checkpoint with problem_type "
            "multi_label_classification)",
            c.label);
      else if (it->is_string() && !it->get_ref<const std::string&>().empty())
        e.label = it->get<std::string>();
      else if (it->is_string())
        problem = fmt::format("missing '{}' (empty string)", c.label);
      else
        problem = fmt::format("'{}' must be {}, got {}", c.label,
                              c.numeric_label ? "a number" : "an integer or a string",
                              io::json_type_name(*it));
    }
    if (problem.empty() && !c.group.empty()) problem = group_problem(obj, c.group, &e.group);
    if (!problem.empty()) {
      bad(std::move(problem));
      return;
    }
    e.text = std::move(*text);
    out->examples.push_back(std::move(e));
  });
}

void read_delimited(const std::string& path, std::string_view content, char sep, bool has_header,
                    const ColumnMap& c, ReadRows* out) {
  std::vector<DelimitedRecord> records = parse_delimited(content, sep);
  size_t first = 0;
  int64_t text_col = c.text_index, pair_col = c.text_pair_index, label_col = c.label_index;
  int64_t group_col = c.group.empty() ? -1 : c.group_index;
  std::string text_name = c.text, pair_name = c.text_pair, label_name = c.label;
  size_t width = 0;
  if (has_header) {
    if (records.empty()) throw InputError(fmt::format("{}: empty file (no header row)", path));
    const DelimitedRecord& h = records[0];
    if (!h.error.empty())
      throw InputError(fmt::format("{}:{}: header row: {}", path, h.line, h.error));
    width = h.fields.size();
    // A name given twice would make a column silently shadow its twin: refused.
    std::unordered_map<std::string_view, size_t> seen;
    for (size_t i = 0; i < h.fields.size(); ++i) {
      if (h.fields[i].empty()) continue;
      const auto [it, fresh] = seen.emplace(h.fields[i], i);
      if (!fresh)
        throw InputError(fmt::format(
            "{}:{}: header row: column '{}' appears twice (columns {} and {}); rename one", path,
            h.line, h.fields[i], it->second + 1, i + 1));
    }
    auto column = [&](const std::string& name, bool optional) -> int64_t {
      auto it = std::find(h.fields.begin(), h.fields.end(), name);
      if (it != h.fields.end()) return it - h.fields.begin();
      if (optional) return -1;
      std::string names;
      for (const std::string& f : h.fields) names += (names.empty() ? "" : ", ") + f;
      throw InputError(fmt::format("{}:{}: no column '{}' in the header (columns: {})", path,
                                   h.line, name, names));
    };
    text_col = column(c.text, false);
    pair_col = c.text_pair.empty() ? -1 : column(c.text_pair, true);
    label_col = column(c.label, false);
    if (!c.group.empty()) group_col = column(c.group, false);
    first = 1;
  } else {
    text_name = fmt::format("column {}", c.text_index);
    pair_name = fmt::format("column {}", c.text_pair_index);
    label_name = fmt::format("column {}", c.label_index);
    // The width every row must have is the first well-formed row's.
    for (const DelimitedRecord& r : records)
      if (r.error.empty()) {
        width = r.fields.size();
        auto check = [&](int64_t index, const char* what, bool optional) {
          if (optional && index == -1) return;
          if (index < 0 || index >= static_cast<int64_t>(width))
            throw InputError(
                fmt::format("{}:{}: {} column index {} is outside the {} columns of the first row",
                            path, r.line, what, index, width));
        };
        check(c.text_index, "text", false);
        check(c.text_pair_index, "text_pair", true);
        check(c.label_index, "label", false);
        if (!c.group.empty()) check(c.group_index, "group", false);
        break;
      }
  }
  for (size_t i = first; i < records.size(); ++i) {
    DelimitedRecord& r = records[i];
    ++out->rows;
    auto bad = [&](std::string reason) { out->bad.push_back({r.line, std::move(reason)}); };
    if (!r.error.empty()) {
      bad(r.error);
      continue;
    }
    if (r.fields.size() != width) {
      bad(fmt::format("ragged row: expected {} fields, found {}", width, r.fields.size()));
      continue;
    }
    std::string problem = text_problem(r.fields[text_col], text_name);
    if (problem.empty() && pair_col >= 0) problem = text_problem(r.fields[pair_col], pair_name);
    if (problem.empty()) {
      const std::string& label = r.fields[label_col];
      const size_t invalid = text::utf8_find_invalid(label);
      if (invalid != std::string::npos)
        problem = fmt::format("invalid UTF-8 in '{}' at byte {}", label_name, invalid + 1);
      else if (blank_text(label) && !c.label_lists)
        problem = fmt::format("missing '{}'", label_name);
    }
    if (problem.empty() && group_col >= 0) {
      problem = text_problem(r.fields[group_col], c.group);
      if (!problem.empty()) problem += " (the query id, data.group_field)";
    }
    if (!problem.empty()) {
      bad(std::move(problem));
      continue;
    }
    RawExample e;
    e.line = r.line;
    e.text = std::move(r.fields[text_col]);
    if (pair_col >= 0) e.text_pair = std::move(r.fields[pair_col]);
    e.label = std::move(r.fields[label_col]);
    if (group_col >= 0) e.group = std::move(r.fields[group_col]);
    if (c.label_lists) {
      // One field of labels joined by the separator; blank: no label.
      const std::string& f = e.label;
      if (!blank_text(f))
        for (size_t at = 0;;) {
          const size_t next = f.find(c.list_separator, at);
          e.label_list.push_back(f.substr(at, next == std::string::npos ? next : next - at));
          if (next == std::string::npos) break;
          at = next + c.list_separator.size();
        }
    }
    out->examples.push_back(std::move(e));
  }
}

}  // namespace

DataFormat parse_data_format(const std::string& value, const std::string& key) {
  if (auto format = find_choice(kDataFormatNames, value)) return *format;
  throw InputError(fmt::format("{}: expected one of {}; got '{}'", key,
                               fmt::join(choice_words(kDataFormatNames), ", "), value));
}

const char* data_format_name(DataFormat format) {
  return choice_name(kDataFormatNames, format).data();
}

DataFormat data_format_for_path(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (ext == ".jsonl" || ext == ".ndjson" || ext == ".json") return DataFormat::kJsonl;
  if (ext == ".tsv" || ext == ".tab") return DataFormat::kTsv;
  if (ext == ".csv") return DataFormat::kCsv;
  throw InputError(fmt::format(
      "{}: cannot tell the format from the extension '{}' (expected .jsonl, .tsv or .csv); set "
      "data.format to jsonl, tsv or csv",
      path, ext));
}

ReadRows read_rows(const std::string& path, DataFormat format, bool has_header,
                   const ColumnMap& columns) {
  if (format == DataFormat::kAuto) format = data_format_for_path(path);
  const std::string content = read_data_source(path);  // a file, or rows given in memory
  ReadRows out;
  if (format == DataFormat::kJsonl && looks_like_flagembedding(content, columns))
    format = DataFormat::kFlagEmbedding;
  if (format == DataFormat::kFlagEmbedding)
    read_flagembedding_jsonl(path, content, &out, columns.teacher_scores);
  else if (format == DataFormat::kJsonl)
    read_jsonl(content, columns, &out);
  else
    read_delimited(path, content, format == DataFormat::kTsv ? '\t' : ',', has_header, columns,
                   &out);
  return out;
}

}  // namespace ftune::data
