// JSON reading with file:line:column errors, typed getters with key-naming errors, atomic writes.
#include "io/json_file.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ftune::io {
namespace {

using nlohmann::json;

// nlohmann reports the byte position (1-based, of the last character read); editors want
// line:column, both 1-based.
std::pair<size_t, size_t> line_column(std::string_view text, size_t byte) {
  const size_t pos = std::min(byte == 0 ? 0 : byte - 1, text.size());  // 0-based offender
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, pos - line_start + 1};
}

std::string show_value(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_array() || j.is_object()) return std::string(json_type_name(j));
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s.replace(57, std::string::npos, "...");
  return fmt::format("{} {}", json_type_name(j), s);
}

const json* lookup(const json& j, std::string_view key, const std::string& path) {
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected a JSON object holding key '{}', got {}", path, key,
                                 json_type_name(j)));
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong_type(const json& v, std::string_view key, const std::string& path,
                             const char* expected) {
  throw InputError(
      fmt::format("{}: key '{}' must be {}, got {}", path, key, expected, show_value(v)));
}

const json& require(const json& j, std::string_view key, const std::string& path,
                    const char* expected) {
  const json* v = lookup(j, key, path);
  if (v) return *v;
  const auto it = j.find(key);
  if (it != j.end()) wrong_type(*it, key, path, expected);  // present but null
  throw InputError(fmt::format("{}: missing required key '{}' ({})", path, key, expected));
}

int64_t as_int(const json& v, std::string_view key, const std::string& path) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      wrong_type(v, key, path, "an integer in the 64-bit range");
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (!v.is_number_integer()) wrong_type(v, key, path, "an integer");
  return v.get<int64_t>();
}

double as_float(const json& v, std::string_view key, const std::string& path) {
  if (!v.is_number()) wrong_type(v, key, path, "a number");
  return v.get<double>();
}

std::string as_string(const json& v, std::string_view key, const std::string& path) {
  if (!v.is_string()) wrong_type(v, key, path, "a string");
  return v.get<std::string>();
}

bool as_bool(const json& v, std::string_view key, const std::string& path) {
  if (!v.is_boolean()) wrong_type(v, key, path, "true or false");
  return v.get<bool>();
}

}  // namespace

// "[json.exception.parse_error.101] parse error at line 1, column 3: syntax error ..." -> the
// part after the position.
std::string parse_error_detail(const json::exception& e) {
  const std::string what = e.what();
  const size_t at = what.find("parse error");
  const size_t colon = what.find(": ", at == std::string::npos ? 0 : at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

json parse_json(std::string_view text, const std::string& path) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    const auto [line, column] = line_column(text, e.byte);
    throw InputError(
        fmt::format("{}:{}:{}: invalid JSON: {}", path, line, column, parse_error_detail(e)));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
}

json read_json_file(const std::string& path) {
  return parse_json(read_file(path), path);
}

void write_json_atomic(const std::string& path, const json& j) {
  std::string text;
  try {
    text = j.dump(2, ' ', true, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("cannot write {}: {}", path, e.what()));
  }
  text += '\n';
  write_file_atomic(path, text);
}

std::string_view json_type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "float";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "binary";
  }
}

int64_t get_int(const json& j, std::string_view key, const std::string& path) {
  return as_int(require(j, key, path, "an integer"), key, path);
}
double get_float(const json& j, std::string_view key, const std::string& path) {
  return as_float(require(j, key, path, "a number"), key, path);
}
std::string get_string(const json& j, std::string_view key, const std::string& path) {
  return as_string(require(j, key, path, "a string"), key, path);
}
bool get_bool(const json& j, std::string_view key, const std::string& path) {
  return as_bool(require(j, key, path, "true or false"), key, path);
}

std::optional<int64_t> get_optional_int(const json& j, std::string_view key,
                                        const std::string& path) {
  const json* v = lookup(j, key, path);
  return v ? std::optional(as_int(*v, key, path)) : std::nullopt;
}
std::optional<double> get_optional_float(const json& j, std::string_view key,
                                         const std::string& path) {
  const json* v = lookup(j, key, path);
  return v ? std::optional(as_float(*v, key, path)) : std::nullopt;
}
std::optional<std::string> get_optional_string(const json& j, std::string_view key,
                                               const std::string& path) {
  const json* v = lookup(j, key, path);
  return v ? std::optional(as_string(*v, key, path)) : std::nullopt;
}
std::optional<bool> get_optional_bool(const json& j, std::string_view key,
                                      const std::string& path) {
  const json* v = lookup(j, key, path);
  return v ? std::optional(as_bool(*v, key, path)) : std::nullopt;
}

}  // namespace ftune::io
