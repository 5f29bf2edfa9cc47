// JSONL reading with file:line errors, from a file or from rows registered in memory
// (data/memory_source.h).
#include "data/jsonl.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/memory_source.h"
#include "io/json_file.h"
#include "text/utf8.h"

namespace ftune::data {

void for_each_jsonl_object(const std::string& path,
                           const std::function<void(const nlohmann::json&, int64_t)>& fn) {
  std::ifstream file;
  std::istringstream memory;
  if (is_memory_path(path)) {
    memory.str(*memory_text(path));
  } else {
    file.open(path, std::ios::binary);
    if (!file) throw InputError(fmt::format("{}: cannot open for reading", path));
  }
  std::istream& in = is_memory_path(path) ? static_cast<std::istream&>(memory) : file;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // Checked first: the JSON parser would report it as a syntax error.
    if (const size_t bad = text::utf8_find_invalid(line); bad != std::string::npos)
      throw InputError(fmt::format("{}:{}: invalid UTF-8 at column {}", path, number, bad + 1));
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(
          fmt::format("{}:{}: invalid JSON at column {}: {}", path, number, e.byte,
                      std::string(e.what()).substr(std::string(e.what()).find(':') + 2)));
    }
    if (!object.is_object())
      throw InputError(
          fmt::format("{}:{}: expected a JSON object, got {}", path, number, object.type_name()));
    fn(object, number);
  }
}

const nlohmann::json& jsonl_field(const nlohmann::json& object, const char* key,
                                  const std::string& path, int64_t line) {
  auto it = object.find(key);
  if (it == object.end()) throw InputError(fmt::format("{}:{}: missing key '{}'", path, line, key));
  return *it;
}

std::vector<int32_t> jsonl_token_ids(const nlohmann::json& v, const char* key,
                                     const std::string& path, int64_t line) {
  if (!v.is_array())
    throw InputError(fmt::format("{}:{}: '{}' must be a list of integers", path, line, key));
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      throw InputError(fmt::format("{}:{}: '{}' must hold non-negative integers, found {}", path,
                                   line, key, x.dump()));
    out.push_back(x.get<int32_t>());
  }
  return out;
}

bool blank_text(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void scan_jsonl_rows(std::string_view content, int64_t* rows,
                     const std::function<void(int64_t, std::string)>& bad,
                     const std::function<void(const nlohmann::json&, int64_t)>& fn) {
  if (content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
  int64_t number = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (blank_text(line)) continue;
    ++*rows;
    const size_t invalid = text::utf8_find_invalid(line);
    if (invalid != std::string_view::npos) {
      bad(number, fmt::format("invalid UTF-8 at column {}", invalid + 1));
      continue;
    }
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      bad(number, fmt::format("invalid JSON at column {}: {}", e.byte, io::parse_error_detail(e)));
      continue;
    } catch (const nlohmann::json::out_of_range&) {
      // A number too large for a double (1e400): nlohmann raises out_of_range, not parse_error.
      bad(number, "invalid JSON: a number too large for a double");
      continue;
    }
    if (!obj.is_object()) {
      bad(number, fmt::format("expected a JSON object, got {}", io::json_type_name(obj)));
      continue;
    }
    fn(obj, number);
  }
}

}  // namespace ftune::data
