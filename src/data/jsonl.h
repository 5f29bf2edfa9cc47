// Line-by-line JSON (JSONL) input: every non-blank line must be a JSON object; errors name the
// file and line. Used by `ftune predict`, `ftune tokenize` and the data readers.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ftune::data {

// Calls fn(object, line_number) for each non-blank line of `path` (1-based line numbers). A line
// that is not a JSON object raises InputError "PATH:LINE: ...".
void for_each_jsonl_object(const std::string& path,
                           const std::function<void(const nlohmann::json&, int64_t)>& fn);

// Whether `s` holds nothing but spaces, tabs and line ends.
bool blank_text(std::string_view s);

// The data readers' JSONL scan, which collects bad rows instead of stopping at the first: for each
// non-blank line of `content` (a UTF-8 BOM skipped, CRLF accepted) it counts one row in *rows and
// calls fn(object, line) when the line is a JSON object, else bad(line, reason): invalid UTF-8,
// invalid JSON, a number too large for a double, another JSON type.
void scan_jsonl_rows(std::string_view content, int64_t* rows,
                     const std::function<void(int64_t, std::string)>& bad,
                     const std::function<void(const nlohmann::json&, int64_t)>& fn);

// Field access with errors that name the file and line: "PATH:LINE: key 'text' must be a string".
const nlohmann::json& jsonl_field(const nlohmann::json& object, const char* key,
                                  const std::string& path, int64_t line);

// A list of token ids (`key`: "input_ids", "token_type_ids"): non-negative integers that fit in
// 32 bits; InputError "PATH:LINE: 'key' must ..." otherwise.
std::vector<int32_t> jsonl_token_ids(const nlohmann::json& value, const char* key,
                                     const std::string& path, int64_t line);

}  // namespace ftune::data
