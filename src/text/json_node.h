// Reading tokenizer.json with errors that say where: every value carries its path
// ("tokenizer.json: pre_tokenizer.pretokenizers[1].pattern"), and typed accessors raise
// InputError naming that path, what was expected and what was found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ftune::text {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path) : v_(&value), path_(std::move(path)) {}

  const nlohmann::json& raw() const { return *v_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return v_->is_null(); }
  bool is_object() const { return v_->is_object(); }
  bool is_array() const { return v_->is_array(); }
  bool is_string() const { return v_->is_string(); }

  // Present and not null.
  bool has(std::string_view key) const;
  // Required member (InputError when missing).
  JsonNode at(std::string_view key) const;
  // Member, or nullopt when missing or null.
  std::optional<JsonNode> get(std::string_view key) const;
  size_t size() const;                  // array length (InputError when not an array)
  JsonNode operator[](size_t i) const;  // array element

  std::string as_string() const;
  bool as_bool() const;
  int64_t as_int() const;
  uint32_t as_u32() const;  // non-negative and below 2^32
  double as_number() const;

  // Convenience: member with a default for missing or null.
  std::string string_or(std::string_view key, std::string_view fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;
  int64_t int_or(std::string_view key, int64_t fallback) const;

  // "expected X, got <type>" error at this node.
  [[noreturn]] void fail(std::string_view expected) const;
  // Any error message at this node.
  [[noreturn]] void fail_msg(std::string_view message) const;

 private:
  const nlohmann::json* v_;
  std::string path_;
};

}  // namespace ftune::text
