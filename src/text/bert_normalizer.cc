// BertNormalizer: clean_text, handle_chinese_chars, strip_accents, lowercase, in that order
// (HF normalizers/bert.rs):
//   clean_text            drop NUL, U+FFFD and control characters (Cc/Cf/Co as of Unicode 8.0,
//                         except \t \n \r), then map every whitespace character to ' '
//   handle_chinese_chars  surround each CJK ideograph with spaces
//   strip_accents         NFD, then drop nonspacing marks (Mn as of Unicode 8.0). Spacing marks
//                         (Mc, e.g. Devanagari vowel signs) stay. Defaults to `lowercase` when
//                         null.
//   lowercase             Rust char::to_lowercase, character by character
#include <memory>

#include "text/normalizer.h"
#include "text/unicode_normalize.h"
#include "text/unicode_props.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void normalize(std::string_view in, uint32_t& origin_prefix, std::string& out) const override {
    if (is_ascii(in)) {
      normalize_ascii(in, origin_prefix, out);
      return;
    }
    thread_local std::string stage1, stage2;
    if (!strip_accents_) {
      first_pass(in, origin_prefix, out, lowercase_);
      return;
    }
    stage1.clear();
    stage2.clear();
    first_pass(in, origin_prefix, stage1, false);
    normalize_unicode(NormForm::kNFD, stage1, stage2);
    origin_prefix = normalized_origin_prefix(NormForm::kNFD, stage1, origin_prefix, stage2);
    // Drop nonspacing marks, then lowercase.
    PrefixTracker track(origin_prefix, out);
    const std::string_view s = stage2;
    for (size_t i = 0; i < s.size();) {
      const size_t at = i;
      const char32_t c = utf8_next(s, i);
      if (!(unicode::flags(c) & unicode::kMarkNonspacing)) {
        if (lowercase_)
          unicode::append_lowercase(out, c);
        else
          utf8_append(out, c);
      }
      track.after(at);
    }
    origin_prefix = track.result();
  }

 private:
  // clean_text + handle_chinese_chars (+ lowercase when no NFD comes in between).
  void first_pass(std::string_view s, uint32_t& origin_prefix, std::string& out, bool lower) const {
    PrefixTracker track(origin_prefix, out);
    for (size_t i = 0; i < s.size();) {
      const size_t at = i;
      const char32_t c = utf8_next(s, i);
      if (clean_text_ && (c == 0 || c == 0xFFFD || unicode::is_bert_control(c))) {
        track.after(at);
        continue;
      }
      if (clean_text_ && unicode::is_bert_whitespace(c)) {
        out.push_back(' ');
      } else if (chinese_ && unicode::is_chinese_char(c)) {
        out.push_back(' ');
        utf8_append(out, c);
        out.push_back(' ');
      } else if (lower) {
        unicode::append_lowercase(out, c);
      } else {
        utf8_append(out, c);
      }
      track.after(at);
    }
    origin_prefix = track.result();
  }

  void normalize_ascii(std::string_view s, uint32_t& origin_prefix, std::string& out) const {
    const size_t base = out.size();
    uint32_t prefix = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (clean_text_) {
        if (c == '\t' || c == '\n' || c == '\r') {
          c = ' ';
        } else if (c < 0x20 || c == 0x7F) {
          continue;  // controls (VT and FF are Cc too, so they go before the whitespace map)
        }
      }
      if (lowercase_ && c >= 'A' && c <= 'Z') c += 32;
      out.push_back(static_cast<char>(c));
      if (i < origin_prefix) prefix = static_cast<uint32_t>(out.size() - base);
    }
    origin_prefix = prefix;
  }

  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

}  // namespace

std::unique_ptr<Normalizer> make_bert_normalizer(const JsonNode& node) {
  const bool lowercase = node.bool_or("lowercase", true);
  bool strip_accents = lowercase;
  if (auto sa = node.get("strip_accents")) strip_accents = sa->as_bool();
  return std::make_unique<BertNormalizer>(node.bool_or("clean_text", true),
                                          node.bool_or("handle_chinese_chars", true), strip_accents,
                                          lowercase);
}

}  // namespace ftune::text
