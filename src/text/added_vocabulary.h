// Added tokens (tokenizer.json "added_tokens"): strings such as [CLS], <|begin_of_text|> or
// user additions that are cut out of the text before the model runs and map to one id each.
//
// As in HF's AddedVocabulary::extract_and_normalize, tokens with normalized=false are found in
// the raw text first; each remaining piece is then normalized on its own (so a normalizer that
// prepends "▁" does so after every such token), and tokens with normalized=true are found in the
// normalized pieces, matched against their own normalized form. Matching is leftmost-longest;
// single_word requires no word character (Rust regex \w) right before and after; lstrip / rstrip
// swallow the whitespace on that side. Ids follow HF's add_tokens: a content already in the
// vocabulary keeps its id, others are numbered from the vocabulary size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "text/json_node.h"
#include "text/model.h"
#include "text/normalizer.h"
#include "text/pretokenized.h"
#include "text/string_id_map.h"
#include "text/u64_map.h"

namespace ftune::text {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  bool operator==(const AddedToken&) const = default;
};

// Parses one entry of "added_tokens" (its "id" is ignored, as HF ignores it).
AddedToken parse_added_token(const JsonNode& node);

class AddedVocabulary {
 public:
  // HF's AddedVocabulary::add_tokens.
  void add_tokens(const std::vector<AddedToken>& tokens, const Model& model,
                  const Normalizer* normalizer);

  // Cuts the added tokens out of `text` and normalizes the rest, leaving the result in `pt`.
  void extract_and_normalize(std::string_view text, const Normalizer* normalizer,
                             PreTokenized& pt) const;

  // When true, special tokens are not matched in the text (transformers' split_special_tokens).
  void set_encode_special_tokens(bool v) { encode_special_tokens_ = v; }

  uint32_t token_to_id(std::string_view content) const { return map_.find(content); }  // kMissing
  // The string decode() uses for an added token id (its normalized form when it has one).
  const std::string* id_to_token(uint32_t id) const;
  bool is_special_content(std::string_view s) const { return special_.count(std::string(s)) > 0; }
  bool empty() const { return map_.size() == 0; }
  size_t size() const { return map_.size(); }
  const AddedToken* token(uint32_t id) const;
  // Number of added contents that are not model tokens (for HF get_vocab_size(true)).
  size_t count_not_in(const Model& model) const;

 private:
  // A byte trie of patterns with leftmost-longest search.
  struct Trie {
    std::vector<int64_t> leaf;  // per node: token id, or -1
    U64Map edges;               // (node << 8 | byte) -> child
    bool first_byte[256] = {};
    void clear();
    void insert(std::string_view pattern, uint32_t id);
    // The leftmost-longest match starting at or after `from`: (start, end, id), or false.
    bool find(std::string_view s, size_t from, size_t& start, size_t& end, uint32_t& id) const;
  };
  struct Entry {
    uint32_t id;
    AddedToken token;
    std::string normalized;  // normalized content when it differs from content
    bool has_normalized = false;
  };

  void rebuild_tries();
  const Entry* entry(uint32_t id) const;
  // HF find_matches + split_with_indices over one piece.
  void split_piece(std::string_view piece, const Span& parent, const Trie& trie, bool original,
                   SpanWriter& out) const;

  StringIdMap map_;             // content -> id
  std::vector<Entry> entries_;  // in insertion order
  U64Map by_id_;                // id -> index in entries_
  std::unordered_set<std::string> special_;
  Trie raw_trie_, normalized_trie_;
  bool has_raw_ = false, has_normalized_ = false;
  bool encode_special_tokens_ = false;
};

}  // namespace ftune::text
