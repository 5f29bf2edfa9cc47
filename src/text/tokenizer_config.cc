// Applying tokenizer_config.json (see tokenizer_config.h).
#include "text/tokenizer_config.h"
#include "io/json_file.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/tokenizer_impl.h"

namespace ftune::text {

namespace {

// A special token value: "text", {"content": "text", ...} (a serialized AddedToken) or null.
std::optional<AddedToken> special_token(const JsonNode& node) {
  if (node.is_null()) return std::nullopt;
  AddedToken t;
  t.special = true;
  t.normalized = false;
  if (node.is_string()) {
    t.content = node.as_string();
  } else if (node.is_object()) {
    t = parse_added_token(node);
    t.special = true;
  } else {
    node.fail("a string or an object with \"content\"");
  }
  if (t.content.empty()) return std::nullopt;
  return t;
}

Side parse_side(const JsonNode& n) {
  const std::string s = n.as_string();
  if (s == "right") return Side::kRight;
  if (s == "left") return Side::kLeft;
  n.fail("\"right\" or \"left\"");
}

}  // namespace

void apply_tokenizer_config(Tokenizer::Impl& impl, std::string_view json_text,
                            const std::string& name) {
  const nlohmann::json j = io::parse_json(json_text, name);  // errors name file:line:column
  const JsonNode root(j, name);
  if (!root.is_object()) root.fail("an object");

  // Special tokens that transformers adds when tokenizer.json lacks them.
  std::vector<AddedToken> to_add;
  // A token from added_tokens_decoder is (re-)added unless tokenizer.json has it with the same
  // properties (transformers compares the whole AddedToken); a named special token only when
  // its content is missing.
  auto consider = [&](const AddedToken& t, bool compare_properties) {
    const uint32_t id = impl.added.token_to_id(t.content);
    if (id != StringIdMap::kMissing) {
      const AddedToken* existing = impl.added.token(id);
      if (!compare_properties || (existing && *existing == t)) return;
    }
    for (const AddedToken& a : to_add)
      if (a.content == t.content) return;
    to_add.push_back(t);
  };
  if (auto dec = root.get("added_tokens_decoder")) {
    if (!dec->is_object()) dec->fail("an object {id: token}");
    std::vector<std::pair<long, AddedToken>> sorted;
    for (auto it = dec->raw().begin(); it != dec->raw().end(); ++it) {
      const JsonNode tok(*it, dec->path() + "[\"" + it.key() + "\"]");
      long id = 0;
      try {
        id = std::stol(it.key());
      } catch (...) {
        tok.fail_msg("key is not a token id");
      }
      sorted.emplace_back(id, parse_added_token(tok));
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [id, t] : sorted) consider(t, true);
  }
  std::optional<AddedToken> named[7];
  const char* keys[7] = {"bos_token", "eos_token", "unk_token", "sep_token",
                         "pad_token", "cls_token", "mask_token"};
  for (int i = 0; i < 7; ++i) {
    if (auto n = root.get(keys[i])) named[i] = special_token(*n);
    if (named[i]) consider(*named[i], false);
  }
  for (const char* list_key : {"additional_special_tokens", "extra_special_tokens"}) {
    auto list = root.get(list_key);
    if (!list || !list->is_array()) continue;
    for (size_t i = 0; i < list->size(); ++i)
      if (auto t = special_token((*list)[i])) consider(*t, false);
  }
  if (!to_add.empty()) impl.added.add_tokens(to_add, *impl.model, impl.normalizer.get());

  if (root.has("split_special_tokens"))
    impl.added.set_encode_special_tokens(root.at("split_special_tokens").as_bool());
  if (auto m = root.get("model_max_length")) {
    const double v = m->as_number();
    if (v > 0 && v < 1e30) impl.model_max_length = static_cast<int64_t>(v);
  }
  if (auto s = root.get("padding_side")) impl.defaults.padding_side = parse_side(*s);
  if (auto s = root.get("truncation_side")) impl.defaults.truncation_side = parse_side(*s);
  if (named[4]) {
    const uint32_t id = impl.token_to_id(named[4]->content);
    if (id != StringIdMap::kMissing) impl.pad_id = id;
  }
}

}  // namespace ftune::text
