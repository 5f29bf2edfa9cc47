// Normalizers: rewrite a piece of text before pre-tokenization (tokenizer.json "normalizer").
//
// Each normalizer appends its output for `in` to `out` and updates `origin_prefix`, the number of
// leading bytes HF would align to original offset 0 (see pretokenized.h): the rule is the one
// HF's NormalizedString::transform applies, i.e. an output character inherits the alignment of
// the input character it was produced from.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "text/json_node.h"

namespace ftune::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const = 0;
};

// Builds a normalizer from its tokenizer.json description (normalizer_factory.cc).
std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node);

// One builder per file; `node` is the normalizer's JSON object.
std::unique_ptr<Normalizer> make_bert_normalizer(const JsonNode& node);  // bert_normalizer.cc
std::unique_ptr<Normalizer> make_unicode_normalizer(
    const std::string& type);  // unicode_normalizers.cc
std::unique_ptr<Normalizer> make_replace_normalizer(const JsonNode& node);  // text_normalizers.cc
std::unique_ptr<Normalizer> make_prepend_normalizer(const JsonNode& node);  // text_normalizers.cc
std::unique_ptr<Normalizer> make_strip_normalizer(const JsonNode& node);    // text_normalizers.cc
std::unique_ptr<Normalizer> make_byte_level_normalizer();                   // text_normalizers.cc
std::unique_ptr<Normalizer> make_precompiled_normalizer(
    const JsonNode& node);  // precompiled_normalizer.cc

// Follows the origin prefix while a normalizer emits output input character by input character:
// the output emitted for an input character that starts inside the input prefix is inside the
// output prefix; the prefix ends at the first output produced from outside it.
class PrefixTracker {
 public:
  PrefixTracker(uint32_t in_prefix, const std::string& out)
      : in_prefix_(in_prefix), out_(out), base_(out.size()) {}
  // Call after emitting the output (possibly none) of the input character starting at in_pos.
  void after(size_t in_pos) {
    if (!open_) return;
    if (in_pos < in_prefix_) {
      result_ = static_cast<uint32_t>(out_.size() - base_);
    } else if (out_.size() > base_ + result_) {
      open_ = false;
    }
  }
  uint32_t result() const { return result_; }

 private:
  uint32_t in_prefix_;
  const std::string& out_;
  size_t base_;
  uint32_t result_ = 0;
  bool open_ = true;
};

}  // namespace ftune::text
