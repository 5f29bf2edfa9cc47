// Builds normalizers from tokenizer.json, including Sequence (applies its members in order).
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/normalizer.h"

namespace ftune::text {

namespace {

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> members)
      : members_(std::move(members)) {}

  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    if (members_.empty()) {
      out.append(in);
      return;
    }
    if (members_.size() == 1) {
      members_[0]->normalize(in, origin_prefix, out);
      return;
    }
    // Ping-pong between two scratch buffers per nesting depth (Sequences may nest). The buffers
    // are heap objects so that growing the list never moves the ones an outer level holds.
    thread_local std::vector<std::unique_ptr<std::string>> scratch;
    thread_local size_t depth = 0;
    while (scratch.size() < 2 * (depth + 1)) scratch.push_back(std::make_unique<std::string>());
    std::string& a = *scratch[2 * depth];
    std::string& b = *scratch[2 * depth + 1];
    ++depth;
    struct Leave {
      size_t& d;
      ~Leave() { --d; }
    } leave{depth};
    a.assign(in);
    for (size_t i = 0; i + 1 < members_.size(); ++i) {
      b.clear();
      members_[i]->normalize(a, origin_prefix, b);
      a.swap(b);
    }
    members_.back()->normalize(a, origin_prefix, out);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> members_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node) {
  if (!node.is_object()) node.fail("an object with a \"type\"");
  const std::string type = node.at("type").as_string();
  if (type == "Sequence") {
    const JsonNode list = node.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> members;
    for (size_t i = 0; i < list.size(); ++i) members.push_back(make_normalizer(list[i]));
    return std::make_unique<Sequence>(std::move(members));
  }
  if (type == "BertNormalizer") return make_bert_normalizer(node);
  if (auto n = make_unicode_normalizer(type)) return n;
  if (type == "Replace") return make_replace_normalizer(node);
  if (type == "Prepend") return make_prepend_normalizer(node);
  if (type == "Strip") return make_strip_normalizer(node);
  if (type == "ByteLevel") return make_byte_level_normalizer();
  if (type == "Precompiled") return make_precompiled_normalizer(node);
  node.at("type").fail_msg(
      "unknown normalizer type \"" + type +
      "\" (known: BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Nmt, "
      "Replace, Prepend, Strip, ByteLevel, Precompiled, Sequence)");
}

}  // namespace ftune::text
