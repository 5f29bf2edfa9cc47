// WordLevel: each word is one vocabulary entry, or the unknown token.
#include <memory>
#include <string>

#include "core/error.h"
#include "text/model.h"

namespace ftune::text {

namespace {

class WordLevel final : public Model {
 public:
  explicit WordLevel(const JsonNode& node) {
    read_vocab_object(node.at("vocab"));
    unk_token_ = node.string_or("unk_token", "<unk>");
  }
  void tokenize(std::string_view word, std::vector<uint32_t>& ids) const override {
    uint32_t id = vocab_.find(word);
    if (id == StringIdMap::kMissing) id = vocab_.find(unk_token_);
    if (id == StringIdMap::kMissing)
      throw InputError("WordLevel: the unknown token \"" + unk_token_ +
                       "\" is not in the vocabulary");
    ids.push_back(id);
  }

 private:
  std::string unk_token_;
};

}  // namespace

std::unique_ptr<Model> make_wordlevel_model(const JsonNode& node) {
  return std::make_unique<WordLevel>(node);
}

}  // namespace ftune::text
