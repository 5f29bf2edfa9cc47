// WordPiece (BERT): greedy longest-match-first. From the start of the word, take the longest
// vocabulary entry that matches; every later piece is looked up with the continuing-subword
// prefix ("##"). If some position matches nothing, or the word has more than
// max_input_chars_per_word characters, the whole word becomes the unknown token.
#include <memory>
#include <string>

#include "core/error.h"
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
    vocab_.for_each([&](std::string_view key, uint32_t) { max_key_len_ = std::max(max_key_len_, key.size()); });
  }

  void tokenize(std::string_view word, std::vector<uint32_t>& ids) const override {
    if (utf8_count(word) > max_chars_) {
      ids.push_back(unk_id());
      return;
    }
    const size_t first = ids.size();
    thread_local std::string key;
    size_t start = 0;
    while (start < word.size()) {
      // Longer candidates than the longest vocabulary entry cannot match: start below it.
      const size_t budget = start == 0 ? max_key_len_ : (max_key_len_ > prefix_.size() ? max_key_len_ - prefix_.size() : 0);
      size_t end = std::min(word.size(), start + budget);
      while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;  // char boundary
      uint32_t found = StringIdMap::kMissing;
      while (end > start) {
        const std::string_view piece = word.substr(start, end - start);
        if (start == 0) {
          found = vocab_.find(piece);
        } else {
          key.assign(prefix_);
          key.append(piece);
          found = vocab_.find(key);
        }
        if (found != StringIdMap::kMissing) break;
        size_t e = end;
        utf8_prev(word, e);
        end = e;
      }
      if (found == StringIdMap::kMissing) {
        ids.resize(first);
        ids.push_back(unk_id());
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }

 private:
  uint32_t unk_id() const {
    const uint32_t id = vocab_.find(unk_token_);
    if (id == StringIdMap::kMissing)
      throw InputError("WordPiece: the unknown token \"" + unk_token_ + "\" is not in the vocabulary");
    return id;
  }

  std::string unk_token_, prefix_;
  size_t max_chars_ = 100;
  size_t max_key_len_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece_model(const JsonNode& node) { return std::make_unique<WordPiece>(node); }

}  // namespace ftune::text
