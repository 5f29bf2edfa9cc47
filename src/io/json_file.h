// JSON files (config.json, model.safetensors.index.json, tokenizer_config.json, ...): reading with
// errors that name the file, line and column; typed getters whose errors name the file, the key,
// what was expected and what was found; atomic writing in the format Python's json.dumps(indent=2)
// produces, so configs that ftune saves diff cleanly against those transformers saves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ftune::io {

// Parses `text`; on a syntax error raises InputError "PATH:LINE:COLUMN: invalid JSON: ...".
nlohmann::json parse_json(std::string_view text, const std::string& path);
// Reads and parses a file (InputError naming it when it is missing or invalid).
nlohmann::json read_json_file(const std::string& path);
// nlohmann's parse error text without its "[json.exception...] parse error at ..." prefix, for
// messages that state the position their own way.
std::string parse_error_detail(const nlohmann::json::exception& e);

// Writes json.dump(2) (2-space indent, keys sorted, non-ASCII escaped as \uXXXX like Python's
// default ensure_ascii) and a final newline, atomically.
void write_json_atomic(const std::string& path, const nlohmann::json& j);

// "null", "boolean", "integer", "float", "string", "array" or "object".
std::string_view json_type_name(const nlohmann::json& j);

// Typed access to key `key` of the object `j` read from `path`. Required getters raise InputError
// when the key is missing or has another type ("config.json: key 'hidden_size' must be an
// integer, got string \"768\""); optional getters return nullopt for a missing or null key and
// raise for another type. get_float accepts integers; get_int does not accept floats.
int64_t get_int(const nlohmann::json& j, std::string_view key, const std::string& path);
double get_float(const nlohmann::json& j, std::string_view key, const std::string& path);
std::string get_string(const nlohmann::json& j, std::string_view key, const std::string& path);
bool get_bool(const nlohmann::json& j, std::string_view key, const std::string& path);

std::optional<int64_t> get_optional_int(const nlohmann::json& j, std::string_view key,
                                        const std::string& path);
std::optional<double> get_optional_float(const nlohmann::json& j, std::string_view key,
                                         const std::string& path);
std::optional<std::string> get_optional_string(const nlohmann::json& j, std::string_view key,
                                               const std::string& path);
std::optional<bool> get_optional_bool(const nlohmann::json& j, std::string_view key,
                                      const std::string& path);

}  // namespace ftune::io
