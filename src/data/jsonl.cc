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

}  // namespace ftune::data
