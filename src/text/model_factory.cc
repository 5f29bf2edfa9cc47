// The shared vocabulary of all models, and dispatch on the model "type".
#include "core/error.h"
#include "text/model.h"

namespace ftune::text {

void Model::add_token(std::string_view token, uint32_t id) {
  vocab_.set(token, id);
  if (id >= kDenseIds) {
    sparse_tokens_[id] = std::string(token);
    return;
  }
  if (id >= tokens_.size()) {
    tokens_.resize(size_t(id) + 1);
    has_token_.resize(size_t(id) + 1, false);
  }
  tokens_[id] = std::string(token);
  has_token_[id] = true;
}

void Model::read_vocab_object(const JsonNode& vocab) {
  if (!vocab.is_object()) vocab.fail("an object {token: id}");
  size_t max_id = 0;
  for (auto it = vocab.raw().begin(); it != vocab.raw().end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
      JsonNode(*it, vocab.path() + "[\"" + it.key() + "\"]").fail("a non-negative integer id");
    max_id = std::max<size_t>(max_id, it->get<uint64_t>());
  }
  tokens_.reserve(std::min<size_t>(max_id + 1, kDenseIds));
  for (auto it = vocab.raw().begin(); it != vocab.raw().end(); ++it)
    add_token(it.key(), it->get<uint32_t>());
}

const std::string* Model::id_to_token(uint32_t id) const {
  if (id < tokens_.size()) return has_token_[id] ? &tokens_[id] : nullptr;
  auto it = sparse_tokens_.find(id);
  return it == sparse_tokens_.end() ? nullptr : &it->second;
}

std::unique_ptr<Model> make_model(const JsonNode& node) {
  if (!node.is_object()) node.fail("an object");
  // "type" is optional in old files: then the fields decide, as HF's untagged deserializer does.
  std::string type;
  if (auto t = node.get("type")) {
    type = t->as_string();
  } else if (node.has("merges")) {
    type = "BPE";
  } else if (node.has("continuing_subword_prefix") && node.has("max_input_chars_per_word")) {
    type = "WordPiece";
  } else if (node.has("vocab") && node.at("vocab").is_array()) {
    type = "Unigram";
  } else {
    type = "WordLevel";
  }
  if (type == "WordPiece") return make_wordpiece_model(node);
  if (type == "BPE") return make_bpe_model(node);
  if (type == "Unigram") return make_unigram_model(node);
  if (type == "WordLevel") return make_wordlevel_model(node);
  node.at("type").fail_msg("unknown model type \"" + type +
                           "\" (known: WordPiece, BPE, Unigram, WordLevel)");
}

}  // namespace ftune::text
