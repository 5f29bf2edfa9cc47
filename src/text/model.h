// Models turn one pre-tokenized word into token ids (tokenizer.json "model"): WordPiece, BPE,
// Unigram and WordLevel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_node.h"
#include "text/string_id_map.h"

namespace ftune::text {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` (a non-empty piece of valid UTF-8) to `ids`. Throws InputError when
  // the word needs an unknown token that the vocabulary lacks (as HF does).
  virtual void tokenize(std::string_view word, std::vector<uint32_t>& ids) const = 0;

  // The vocabulary (HF Model::token_to_id / id_to_token / get_vocab_size).
  uint32_t token_to_id(std::string_view token) const {
    return vocab_.find(token);
  }  // kMissing if absent
  const std::string* id_to_token(uint32_t id) const;
  virtual size_t vocab_size() const { return vocab_.size(); }
  const StringIdMap& vocab() const { return vocab_; }

 protected:
  // Records token -> id (later entries win) and id -> token.
  void add_token(std::string_view token, uint32_t id);
  // Reads a JSON object {token: id, ...} into the vocabulary.
  void read_vocab_object(const JsonNode& vocab);

  StringIdMap vocab_;
  // id -> token: dense for ids below kDenseIds, a hash map above (vocabularies with holes or
  // huge ids stay cheap).
  static constexpr uint32_t kDenseIds = 1u << 22;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  std::unordered_map<uint32_t, std::string> sparse_tokens_;
};

// Builds the model from its tokenizer.json description (model_factory.cc).
std::unique_ptr<Model> make_model(const JsonNode& node);

std::unique_ptr<Model> make_wordpiece_model(const JsonNode& node);  // wordpiece.cc
std::unique_ptr<Model> make_bpe_model(const JsonNode& node);        // bpe.cc
std::unique_ptr<Model> make_unigram_model(const JsonNode& node);    // unigram.cc
std::unique_ptr<Model> make_wordlevel_model(const JsonNode& node);  // wordlevel.cc

}  // namespace ftune::text
