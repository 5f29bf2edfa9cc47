// Query groups: FlagEmbedding's nested JSONL expanded into rows, dense group ids, relevance and
// group statistics (see groups.h).
#include "data/groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/jsonl.h"
#include "io/json_file.h"
#include "text/utf8.h"

namespace ftune::data {
namespace {

// Why `v` cannot be a passage or query text, or "" when it can.
std::string text_problem(const nlohmann::json& v, const std::string& what) {
  if (!v.is_string())
    return fmt::format("{} must be a string, got {}", what, io::json_type_name(v));
  const std::string& s = v.get_ref<const std::string&>();
  const size_t bad = text::utf8_find_invalid(s);
  if (bad != std::string::npos) return fmt::format("invalid UTF-8 in {} at byte {}", what, bad + 1);
  if (blank_text(s)) return fmt::format("{} is empty", what);
  return "";
}

// Checks the passages of `key` ("pos" / "neg") and their optional scores; "" when fine.
std::string passages_problem(const nlohmann::json& obj, const char* key, bool required,
                             std::vector<std::string>* to, bool need_scores,
                             std::vector<std::string>* scores) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return required ? fmt::format("missing '{}'", key) : "";
  if (!it->is_array())
    return fmt::format("'{}' must be a list of strings, got {}", key, io::json_type_name(*it));
  if (required && it->empty()) return fmt::format("'{}' is empty: a query needs a positive", key);
  for (size_t i = 0; i < it->size(); ++i) {
    std::string p = text_problem((*it)[i], fmt::format("'{}'[{}]", key, i));
    if (!p.empty()) return p;
    to->push_back((*it)[i].get<std::string>());
  }
  const std::string scores_key = fmt::format("{}_scores", key);
  auto sc = obj.find(scores_key);
  if (need_scores && !it->empty() && (sc == obj.end() || sc->is_null()))
    return fmt::format("missing '{}' (the teacher's score of each '{}' entry: training.loss {})",
                       scores_key, key, "margin_mse or distill_mse read them");
  if (sc != obj.end() && !sc->is_null()) {
    if (!sc->is_array() || sc->size() != it->size())
      return fmt::format("'{}' must be a list of {} numbers, one per '{}' entry", scores_key,
                         it->size(), key);
    for (size_t i = 0; i < sc->size(); ++i)
      if (!(*sc)[i].is_number())
        return fmt::format("'{}'[{}] must be a number, got {}", scores_key, i,
                           io::json_type_name((*sc)[i]));
    for (size_t i = 0; i < sc->size() && need_scores; ++i) scores->push_back((*sc)[i].dump());
  }
  return "";
}

}  // namespace

bool looks_like_flagembedding(std::string_view content, const ColumnMap& columns) {
  if (content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    if (blank_text(line)) continue;
    const nlohmann::json obj = nlohmann::json::parse(line, nullptr, false);
    return obj.is_object() && !obj.contains(columns.text) && obj.contains("query") &&
           obj["query"].is_string() && obj.contains("pos") && obj["pos"].is_array();
  }
  return false;
}

void read_flagembedding_jsonl(const std::string& path, std::string_view content, ReadRows* out,
                              bool teacher_scores) {
  (void)path;
  auto bad_line = [&](int64_t line, std::string reason) {
    out->bad.push_back({line, std::move(reason)});
  };
  scan_jsonl_rows(content, &out->rows, bad_line, [&](const nlohmann::json& obj, int64_t number) {
    std::string problem = obj.contains("query") ? text_problem(obj["query"], "'query'")
                                                : std::string("missing 'query'");
    std::vector<std::string> positives, negatives, pos_scores, neg_scores;
    if (problem.empty())
      problem = passages_problem(obj, "pos", true, &positives, teacher_scores, &pos_scores);
    if (problem.empty())
      problem = passages_problem(obj, "neg", false, &negatives, teacher_scores, &neg_scores);
    if (!problem.empty()) {
      bad_line(number, std::move(problem));
      return;
    }
    const std::string query = obj["query"].get<std::string>();
    const std::string group = fmt::format("line {}", number);
    auto emit = [&](const std::vector<std::string>& passages, const char* label,
                    const std::vector<std::string>& scores) {
      for (size_t i = 0; i < passages.size(); ++i) {
        const std::string& p = passages[i];
        RawExample e;
        e.line = number;
        e.text = query;
        e.text_pair = p;
        e.label = teacher_scores ? scores[i] : label;
        e.group = group;
        out->examples.push_back(std::move(e));
      }
    };
    emit(positives, "1", pos_scores);
    emit(negatives, "0", neg_scores);
  });
}

int64_t assign_group_ids(std::vector<RawExample>& examples) {
  std::unordered_map<std::string, int64_t> ids;
  for (RawExample& e : examples) {
    if (e.group.empty()) {
      e.group_id = -1;
      continue;
    }
    e.group_id = ids.emplace(e.group, static_cast<int64_t>(ids.size())).first->second;
  }
  return static_cast<int64_t>(ids.size());
}

float relevance_of(const LabelSet& labels, int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(labels.names.size())) return 0.0f;
  if (const auto v = integer_label(labels.names[id])) return *v > 0 ? static_cast<float>(*v) : 0.0f;
  return static_cast<float>(id);
}

std::vector<float> top_target_relevance(const std::vector<RawExample>& examples,
                                        const std::vector<float>& targets) {
  std::vector<int64_t> top;  // per group: the row with the highest target so far
  for (size_t i = 0; i < examples.size(); ++i) {
    const int64_t g = examples[i].group_id;
    if (g < 0) continue;
    if (g >= static_cast<int64_t>(top.size())) top.resize(g + 1, -1);
    if (top[g] < 0 || targets[i] > targets[top[g]]) top[g] = static_cast<int64_t>(i);
  }
  std::vector<float> relevance(examples.size(), 0.0f);
  for (int64_t i : top)
    if (i >= 0) relevance[i] = 1.0f;
  return relevance;
}

GroupStats group_stats(const std::vector<RawExample>& examples,
                       const std::vector<float>& relevance) {
  struct Acc {
    int64_t rows = 0, line = 0;
    bool positive = false;
  };
  std::vector<Acc> acc;
  for (size_t i = 0; i < examples.size(); ++i) {
    const int64_t g = examples[i].group_id;
    if (g < 0) continue;
    if (g >= static_cast<int64_t>(acc.size())) acc.resize(g + 1);
    if (acc[g].rows++ == 0) acc[g].line = examples[i].line;
    if (relevance[i] > 0.0f) acc[g].positive = true;
  }
  GroupStats s;
  for (const Acc& a : acc) {
    if (a.rows == 0) continue;
    ++s.groups;
    s.smallest = s.smallest == 0 ? a.rows : std::min(s.smallest, a.rows);
    s.largest = std::max(s.largest, a.rows);
    if (!a.positive && s.without_positive++ == 0) s.first_without_positive_line = a.line;
  }
  return s;
}

}  // namespace ftune::data
