// JSONL reading with file:line errors.
#include "data/jsonl.h"

#include <fmt/format.h>

#include <fstream>

#include "core/error.h"
#include "text/utf8.h"

namespace ftune::data {

void for_each_jsonl_object(const std::string& path,
                           const std::function<void(const nlohmann::json&, int64_t)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open for reading", path));
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

}  // namespace ftune::data
