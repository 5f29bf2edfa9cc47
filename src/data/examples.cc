// Reading, labelling and tokenizing examples.
#include "data/examples.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "core/error.h"
#include "data/jsonl.h"

namespace ftune::data {
namespace {

std::string string_field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                         int64_t line) {
  const nlohmann::json& v = jsonl_field(obj, key.c_str(), path, line);
  if (!v.is_string())
    throw InputError(
        fmt::format("{}:{}: '{}' must be a string, got {}", path, line, key, v.type_name()));
  std::string s = v.get<std::string>();
  if (s.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(fmt::format("{}:{}: '{}' is empty", path, line, key));
  return s;
}

}  // namespace

std::vector<RawExample> read_examples(const std::string& path, const ExampleFields& f) {
  std::vector<RawExample> out;
  for_each_jsonl_object(path, [&](const nlohmann::json& obj, int64_t line) {
    RawExample e;
    e.line = line;
    e.text = string_field(obj, f.text, path, line);
    if (obj.contains(f.text_pair) && !obj[f.text_pair].is_null())
      e.text_pair = string_field(obj, f.text_pair, path, line);
    const nlohmann::json& label = jsonl_field(obj, f.label.c_str(), path, line);
    if (label.is_number_integer())
      e.label = std::to_string(label.get<int64_t>());
    else if (label.is_string() && !label.get<std::string>().empty())
      e.label = label.get<std::string>();
    else
      throw InputError(
          fmt::format("{}:{}: '{}' must be an integer or a non-empty string", path, line, f.label));
    out.push_back(std::move(e));
  });
  if (out.empty()) throw InputError(fmt::format("{}: no examples", path));
  return out;
}

std::optional<int64_t> integer_label(const std::string& label) {
  const size_t digits = label.size() - (label.starts_with('-') ? 1 : 0);
  if (digits == 0 || digits > 18 ||
      label.find_first_not_of("0123456789", label.size() - digits) != std::string::npos)
    return std::nullopt;
  return std::stoll(label);
}

LabelSet LabelSet::from_examples(const std::vector<RawExample>& examples, const std::string& path) {
  // Distinct labels with the line each first appears on.
  std::map<std::string, int64_t> first_line;
  for (const RawExample& e : examples) first_line.emplace(e.label, e.line);
  std::vector<std::pair<int64_t, std::string>> in_file_order;
  for (const auto& [label, line] : first_line) in_file_order.emplace_back(line, label);
  std::sort(in_file_order.begin(), in_file_order.end());
  bool all_integers = true;
  std::map<int64_t, std::string> by_value;
  for (const auto& [line, label] : in_file_order) {
    const std::optional<int64_t> v = integer_label(label);
    if (!v) {
      all_integers = false;
      break;
    }
    if (const auto [it, fresh] = by_value.emplace(*v, label); !fresh)
      throw InputError(fmt::format(
          "{}:{}: label '{}' is the integer {} that line {} writes '{}'; write each integer label "
          "one way (labels are names, so these would be two classes)",
          path, line, label, *v, first_line.at(it->second), it->second));
  }
  std::vector<std::string> names;
  if (all_integers) {
    for (const auto& [value, label] : by_value) names.push_back(label);
  } else {
    for (const auto& [label, line] : first_line) names.push_back(label);
  }
  LabelSet s = from_names(names, path);
  s.integer_aliases = false;  // the ids are ftune's order: only names address them
  return s;
}

LabelSet LabelSet::from_names(const std::vector<std::string>& names, const std::string& key) {
  LabelSet s;
  s.names = names;
  s.integer_aliases = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!s.ids.emplace(names[i], static_cast<int32_t>(i)).second)
      throw InputError(fmt::format("{}: label '{}' is listed twice", key, names[i]));
    if (integer_label(names[i])) s.integer_aliases = false;
  }
  return s;
}

LabelSet LabelSet::from_map(const std::map<std::string, int32_t>& ids, const std::string& key) {
  std::vector<std::string> names(ids.size());
  std::vector<bool> taken(ids.size(), false);
  for (const auto& [name, id] : ids) {
    if (id < 0 || id >= static_cast<int32_t>(ids.size()))
      throw InputError(fmt::format("{}: label '{}' has id {}; ids must be 0..{}", key, name, id,
                                   ids.size() - 1));
    if (taken[id])
      throw InputError(
          fmt::format("{}: labels '{}' and '{}' both have id {}", key, names[id], name, id));
    taken[id] = true;
    names[id] = name;
  }
  return from_names(names, key);
}

std::optional<int32_t> LabelSet::find(const std::string& label) const {
  if (auto it = ids.find(label); it != ids.end()) return it->second;
  if (integer_aliases) {
    const std::optional<int64_t> v = integer_label(label);
    if (v && *v >= 0 && *v < static_cast<int64_t>(names.size()) && std::to_string(*v) == label)
      return static_cast<int32_t>(*v);
  }
  return std::nullopt;
}

std::string LabelSet::describe() const {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += fmt::format("{}'{}'", i ? ", " : "", names[i]);
  if (names.size() > 8) s += ", ...";
  if (integer_aliases) s += fmt::format(", or an id 0..{}", names.size() - 1);
  return s;
}

int32_t LabelSet::id(const RawExample& e, const std::string& path) const {
  if (const std::optional<int32_t> i = find(e.label)) return *i;
  throw InputError(fmt::format("{}:{}: label '{}' is not one of the {} labels ({})", path, e.line,
                               e.label, names.size(), describe()));
}

std::vector<TokenizedExample> tokenize_examples(const text::Tokenizer& tokenizer,
                                                const std::vector<RawExample>& raw,
                                                const LabelSet& labels, const std::string& path,
                                                int64_t max_length, TokenizeStats* stats,
                                                const text::PairTemplate* pair_template,
                                                const std::vector<int32_t>* label_ids) {
  std::vector<text::TextPair> pairs;
  pairs.reserve(raw.size());
  std::vector<TokenizedExample> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    pairs.push_back({raw[i].text, raw[i].text_pair});
    out[i].label = label_ids ? (*label_ids)[i] : labels.id(raw[i], path);
  }
  text::EncodeOptions full = tokenizer.default_options();
  text::EncodeOptions cut = full;
  cut.truncation = text::Truncation::kLongestFirst;
  cut.max_length = max_length;
  const auto t0 = std::chrono::steady_clock::now();
  auto encode = [&](const std::vector<text::TextPair>& in, bool truncate) {
    if (pair_template) return pair_template->encode_batch(tokenizer, in, truncate ? max_length : 0);
    return tokenizer.encode_batch(in, truncate ? cut : full);
  };
  const std::vector<text::Encoding> enc = encode(pairs, true);
  TokenizeStats s;
  std::vector<text::TextPair> at_limit;
  for (size_t i = 0; i < raw.size(); ++i) {
    out[i].input_ids.assign(enc[i].ids.begin(), enc[i].ids.end());
    out[i].token_type_ids.assign(enc[i].type_ids.begin(), enc[i].type_ids.end());
    s.tokens += static_cast<int64_t>(enc[i].size());
    s.longest = std::max<int64_t>(s.longest, enc[i].size());
    if (static_cast<int64_t>(enc[i].size()) == max_length) at_limit.push_back(pairs[i]);
  }
  // An encoding at the limit was truncated if the untruncated one is longer (encoded again, in
  // parallel like the first pass).
  if (!at_limit.empty())
    for (const text::Encoding& e : encode(at_limit, false))
      if (static_cast<int64_t>(e.size()) > max_length) ++s.truncated;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = s;
  return out;
}

}  // namespace ftune::data
