// Reading, labelling and tokenizing examples.
#include "data/examples.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>

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

LabelSet LabelSet::from_examples(const std::vector<RawExample>& examples) {
  std::set<std::string> names;
  bool all_int = true;
  int64_t max_int = -1;
  for (const RawExample& e : examples) {
    names.insert(e.label);
    const bool is_int = !e.label.empty() &&
                        e.label.find_first_not_of("0123456789") == std::string::npos &&
                        e.label.size() < 9;
    all_int = all_int && is_int;
    if (is_int) max_int = std::max<int64_t>(max_int, std::stoll(e.label));
  }
  LabelSet s;
  s.integer = all_int;
  if (all_int) {
    for (int64_t i = 0; i <= std::max<int64_t>(max_int, 1); ++i)
      s.names.push_back(std::to_string(i));
  } else {
    s.names.assign(names.begin(), names.end());
  }
  for (size_t i = 0; i < s.names.size(); ++i) s.ids[s.names[i]] = static_cast<int32_t>(i);
  return s;
}

LabelSet LabelSet::from_names(const std::vector<std::string>& names) {
  LabelSet s;
  s.names = names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!s.ids.emplace(names[i], static_cast<int32_t>(i)).second)
      throw InputError(fmt::format("label '{}' is listed twice", names[i]));
    s.ids[std::to_string(i)] = static_cast<int32_t>(i);  // integer labels address names by id
  }
  return s;
}

LabelSet LabelSet::from_map(const std::map<std::string, int32_t>& ids, const std::string& key) {
  std::vector<std::string> names(ids.size());
  for (const auto& [name, id] : ids) {
    if (id < 0 || id >= static_cast<int32_t>(ids.size()))
      throw InputError(fmt::format("{}: label '{}' has id {}; ids must be 0..{}", key, name, id,
                                   ids.size() - 1));
    if (!names[id].empty())
      throw InputError(
          fmt::format("{}: labels '{}' and '{}' both have id {}", key, names[id], name, id));
    names[id] = name;
  }
  return from_names(names);
}

int32_t LabelSet::id(const RawExample& e, const std::string& path) const {
  auto it = ids.find(e.label);
  if (it == ids.end())
    throw InputError(fmt::format("{}:{}: label '{}' is not one of the {} labels ({}{})", path,
                                 e.line, e.label, names.size(), names.front(),
                                 names.size() > 1 ? ", ..." : ""));
  return it->second;
}

std::vector<TokenizedExample> tokenize_examples(const text::Tokenizer& tokenizer,
                                                const std::vector<RawExample>& raw,
                                                const LabelSet& labels, const std::string& path,
                                                int64_t max_length, TokenizeStats* stats) {
  std::vector<text::TextPair> pairs;
  pairs.reserve(raw.size());
  std::vector<TokenizedExample> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    pairs.push_back({raw[i].text, raw[i].text_pair});
    out[i].label = labels.id(raw[i], path);
  }
  text::EncodeOptions full = tokenizer.default_options();
  text::EncodeOptions cut = full;
  cut.truncation = text::Truncation::kLongestFirst;
  cut.max_length = max_length;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<text::Encoding> enc = tokenizer.encode_batch(pairs, cut);
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
    for (const text::Encoding& e : tokenizer.encode_batch(at_limit, full))
      if (static_cast<int64_t>(e.size()) > max_length) ++s.truncated;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = s;
  return out;
}

}  // namespace ftune::data
