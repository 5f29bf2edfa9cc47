// Pre-tokenizers that cut at character classes: BertPreTokenizer (whitespace removed, then
// punctuation isolated), Whitespace (the regex \w+|[^\w\s]+ of Rust's regex crate),
// WhitespaceSplit, Punctuation, Digits, CharDelimiterSplit and FixedLength.
#include <memory>
#include <vector>

#include "core/error.h"
#include "text/pre_tokenizer.h"
#include "text/split.h"
#include "text/unicode_props.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

// BertPreTokenizer: split on whitespace (removed), then isolate each punctuation character.
// Both splits are slices of the same piece, so one pass emits the final slices.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenized& pt) const override {
    pt.rewrite([](std::string_view s, const Span& span, SpanWriter& out) {
      size_t word = 0, i = 0;
      while (i < s.size()) {
        const size_t at = i;
        const unsigned char b = static_cast<unsigned char>(s[i]);
        char32_t c;
        if (b < 0x80) {
          c = b;
          ++i;
        } else {
          c = utf8_next(s, i);
        }
        if (unicode::is_whitespace(c)) {
          out.emit_slice(s, span, word, at);
          word = i;
        } else if (unicode::is_punctuation(c)) {
          out.emit_slice(s, span, word, at);
          out.emit_slice(s, span, at, i);
          word = i;
        }
      }
      out.emit_slice(s, span, word, s.size());
    });
  }
};

// Whitespace: the words of \w+|[^\w\s]+ (Rust regex: \w is Unicode word, \s White_Space).
class Whitespace final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenized& pt) const override {
    pt.rewrite([](std::string_view s, const Span& span, SpanWriter& out) {
      size_t i = 0;
      int kind = 0;  // 0 none, 1 word run, 2 other run
      size_t start = 0;
      while (i < s.size()) {
        const size_t at = i;
        const char32_t c = utf8_next(s, i);
        const int k = unicode::is_word(c) ? 1 : unicode::is_whitespace(c) ? 0 : 2;
        if (k != kind) {
          if (kind != 0) out.emit_slice(s, span, start, at);
          kind = k;
          start = at;
        }
      }
      if (kind != 0) out.emit_slice(s, span, start, s.size());
    });
  }
};

// A character predicate with a split behavior (WhitespaceSplit, Punctuation, Digits,
// CharDelimiterSplit).
template <class Pred>
class PredicateSplit final : public PreTokenizer {
 public:
  PredicateSplit(Pred pred, SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  void pre_tokenize(PreTokenized& pt) const override {
    thread_local std::vector<Segment> segments;
    pt.rewrite([&](std::string_view s, const Span& span, SpanWriter& out) {
      segments_from_predicate(s, pred_, segments);
      split_segments(s, span, segments, false, behavior_, out);
    });
  }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <class Pred>
std::unique_ptr<PreTokenizer> predicate_split(Pred pred, SplitBehavior behavior) {
  return std::make_unique<PredicateSplit<Pred>>(pred, behavior);
}

class FixedLength final : public PreTokenizer {
 public:
  explicit FixedLength(size_t length) : length_(length) {}
  void pre_tokenize(PreTokenized& pt) const override {
    pt.rewrite([&](std::string_view s, const Span& span, SpanWriter& out) {
      size_t start = 0, i = 0, n = 0;
      while (i < s.size()) {
        i += utf8_len(static_cast<unsigned char>(s[i]));
        if (++n == length_) {
          out.emit_slice(s, span, start, i);
          start = i;
          n = 0;
        }
      }
      out.emit_slice(s, span, start, s.size());
    });
  }

 private:
  size_t length_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_char_pre_tokenizer(const std::string& type,
                                                      const JsonNode& node) {
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit")
    return predicate_split([](char32_t c) { return unicode::is_whitespace(c); },
                           SplitBehavior::kRemoved);
  if (type == "Punctuation") {
    const auto behavior =
        node.has("behavior")
            ? parse_split_behavior(node.at("behavior").as_string(), node.at("behavior").path())
            : SplitBehavior::kIsolated;
    return predicate_split([](char32_t c) { return unicode::is_punctuation(c); }, behavior);
  }
  if (type == "Digits") {
    const bool individual = node.bool_or("individual_digits", false);
    return predicate_split([](char32_t c) { return unicode::is_numeric(c); },
                           individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "CharDelimiterSplit" || type == "Delimiter") {
    const std::string d = node.at("delimiter").as_string();
    if (d.empty() || utf8_count(d) != 1) node.at("delimiter").fail("a single character");
    size_t i = 0;
    const char32_t delim = utf8_next(d, i);
    return predicate_split([delim](char32_t c) { return c == delim; }, SplitBehavior::kRemoved);
  }
  if (type == "FixedLength") {
    const int64_t length = node.int_or("length", 5);
    if (length <= 0) node.at("length").fail("a positive integer");
    return std::make_unique<FixedLength>(static_cast<size_t>(length));
  }
  return nullptr;
}

}  // namespace ftune::text
