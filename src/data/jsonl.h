// Line-by-line JSON (JSONL) input: every non-blank line must be a JSON object; errors name the
// file and line. Used by `ftune predict`, `ftune tokenize` and the data readers.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftune::data {

// Calls fn(object, line_number) for each non-blank line of `path` (1-based line numbers). A line
// that is not a JSON object raises InputError "PATH:LINE: ...".
void for_each_jsonl_object(const std::string& path,
                           const std::function<void(const nlohmann::json&, int64_t)>& fn);

// Field access with errors that name the file and line: "PATH:LINE: key 'text' must be a string".
const nlohmann::json& jsonl_field(const nlohmann::json& object, const char* key,
                                  const std::string& path, int64_t line);

// A list of token ids (`key`: "input_ids", "token_type_ids"): non-negative integers that fit in
// 32 bits; InputError "PATH:LINE: 'key' must ..." otherwise.
std::vector<int32_t> jsonl_token_ids(const nlohmann::json& value, const char* key,
                                     const std::string& path, int64_t line);

}  // namespace ftune::data
