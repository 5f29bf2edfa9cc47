// WordPiece (BERT): greedy longest-match-first. From the start of the word, take the longest
// vocabulary entry that matches; every later piece is looked up with the continuing-subword
// prefix ("##"). If some position matches nothing, or the word has more than
// max_input_chars_per_word characters, the whole word becomes the unknown token.
// HF tries every end position from the longest down; two tries (all entries, and the entries
// that start with the prefix, stored without it) give the same longest match in one walk.
#include <memory>
#include <string>

#include "core/error.h"
#include "text/byte_trie.h"
#include "text/model.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

class WordPiece final : public Model {
 public:
  explicit WordPiece(const JsonNode& node) {
    read_vocab_object(node.at("vocab"));
    unk_token_ = node.string_or("unk_token", "[UNK]");
    prefix_ = node.string_or("continuing_subword_prefix", "##");
    max_chars_ = static_cast<size_t>(node.int_or("max_input_chars_per_word", 100));
    vocab_.for_each([&](std::string_view key, uint32_t id) {
      if (key.empty()) return;
      first_.insert(key, id);
      if (key.size() > prefix_.size() && key.compare(0, prefix_.size(), prefix_) == 0)
        continuing_.insert(key.substr(prefix_.size()), id);
    });
  }

  void tokenize(std::string_view word, std::vector<uint32_t>& ids) const override {
    if (utf8_count(word) > max_chars_) {
      ids.push_back(unk_id());
      return;
    }
    const size_t first = ids.size();
    size_t start = 0;
    while (start < word.size()) {
      uint32_t id = 0;
      const size_t len = (start == 0 ? first_ : continuing_).longest_prefix(word.substr(start), id);
      if (len == 0) {
        ids.resize(first);
        ids.push_back(unk_id());
        return;
      }
      ids.push_back(id);
      start += len;
    }
  }

 private:
  uint32_t unk_id() const {
    const uint32_t id = vocab_.find(unk_token_);
    if (id == StringIdMap::kMissing)
      throw InputError("WordPiece: the unknown token \"" + unk_token_ +
                       "\" is not in the vocabulary");
    return id;
  }

  std::string unk_token_, prefix_;
  size_t max_chars_ = 100;
  ByteTrie first_;       // every entry
  ByteTrie continuing_;  // entries that start with the prefix, without it
};

}  // namespace

std::unique_ptr<Model> make_wordpiece_model(const JsonNode& node) {
  return std::make_unique<WordPiece>(node);
}

}  // namespace ftune::text
