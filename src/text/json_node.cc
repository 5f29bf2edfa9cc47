// JsonNode: typed, located access to tokenizer.json values (see json_node.h).
#include "text/json_node.h"

#include "core/error.h"

namespace ftune::text {

namespace {

std::string type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

// "file.json" + "model" -> "file.json: model"; "file.json: model" + "vocab" -> "file.json:
// model.vocab".
std::string child_path(const std::string& parent, std::string_view key) {
  if (parent.find(": ") == std::string::npos) return parent + ": " + std::string(key);
  return parent + "." + std::string(key);
}

}  // namespace

void JsonNode::fail(std::string_view expected) const {
  throw InputError(path_ + ": expected " + std::string(expected) + ", got " + type_name(*v_));
}

void JsonNode::fail_msg(std::string_view message) const {
  throw InputError(path_ + ": " + std::string(message));
}

bool JsonNode::has(std::string_view key) const {
  if (!v_->is_object()) return false;
  auto it = v_->find(key);
  return it != v_->end() && !it->is_null();
}

JsonNode JsonNode::at(std::string_view key) const {
  if (!v_->is_object()) fail("an object");
  auto it = v_->find(key);
  if (it == v_->end()) throw InputError(path_ + ": missing key \"" + std::string(key) + "\"");
  return JsonNode(*it, child_path(path_, key));
}

std::optional<JsonNode> JsonNode::get(std::string_view key) const {
  if (!v_->is_object()) fail("an object");
  auto it = v_->find(key);
  if (it == v_->end() || it->is_null()) return std::nullopt;
  return JsonNode(*it, child_path(path_, key));
}

size_t JsonNode::size() const {
  if (!v_->is_array()) fail("an array");
  return v_->size();
}

JsonNode JsonNode::operator[](size_t i) const {
  if (!v_->is_array()) fail("an array");
  const std::string sep = path_.find(": ") == std::string::npos ? ": " : "";
  return JsonNode((*v_)[i], path_ + sep + "[" + std::to_string(i) + "]");
}

std::string JsonNode::as_string() const {
  if (!v_->is_string()) fail("a string");
  return v_->get<std::string>();
}

bool JsonNode::as_bool() const {
  if (!v_->is_boolean()) fail("a boolean");
  return v_->get<bool>();
}

int64_t JsonNode::as_int() const {
  if (v_->is_number_unsigned()) {
    const uint64_t u = v_->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail("an integer below 2^63");
    return static_cast<int64_t>(u);
  }
  if (!v_->is_number_integer()) fail("an integer");
  return v_->get<int64_t>();
}

uint32_t JsonNode::as_u32() const {
  const int64_t i = as_int();
  if (i < 0 || i > static_cast<int64_t>(UINT32_MAX)) fail("an integer in [0, 2^32)");
  return static_cast<uint32_t>(i);
}

double JsonNode::as_number() const {
  if (!v_->is_number()) fail("a number");
  return v_->get<double>();
}

std::string JsonNode::string_or(std::string_view key, std::string_view fallback) const {
  auto n = get(key);
  return n ? n->as_string() : std::string(fallback);
}

bool JsonNode::bool_or(std::string_view key, bool fallback) const {
  auto n = get(key);
  return n ? n->as_bool() : fallback;
}

int64_t JsonNode::int_or(std::string_view key, int64_t fallback) const {
  auto n = get(key);
  return n ? n->as_int() : fallback;
}

}  // namespace ftune::text
