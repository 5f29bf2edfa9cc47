// Builds pre-tokenizers from tokenizer.json, including Sequence (applies its members in order).
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/pre_tokenizer.h"

namespace ftune::text {

namespace {

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> members)
      : members_(std::move(members)) {}
  void pre_tokenize(PreTokenized& pt) const override {
    for (const auto& m : members_) m->pre_tokenize(pt);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> members_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node) {
  if (!node.is_object()) node.fail("an object with a \"type\"");
  const std::string type = node.at("type").as_string();
  if (type == "Sequence") {
    const JsonNode list = node.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> members;
    for (size_t i = 0; i < list.size(); ++i) members.push_back(make_pre_tokenizer(list[i]));
    return std::make_unique<Sequence>(std::move(members));
  }
  if (auto p = make_char_pre_tokenizer(type, node)) return p;
  if (type == "ByteLevel") return make_byte_level_pre_tokenizer(node);
  if (type == "Metaspace") return make_metaspace_pre_tokenizer(node);
  if (type == "Split") return make_split_pre_tokenizer(node);
  node.at("type").fail_msg(
      "unsupported pre-tokenizer type \"" + type +
      "\" (supported: BertPreTokenizer, Whitespace, WhitespaceSplit, ByteLevel, Metaspace, "
      "Split, Digits, Punctuation, CharDelimiterSplit, FixedLength, Sequence)");
}

}  // namespace ftune::text
