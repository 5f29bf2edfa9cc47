// ByteLevel pre-tokenizer (GPT-2, RoBERTa, Llama 3): optionally prepend a space, split with
// GPT-2's regex, then spell every byte of every piece with the GPT-2 byte alphabet.
#include <memory>
#include <vector>

#include "text/byte_level_alphabet.h"
#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/split.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        use_regex_(use_regex),
        regex_(kGpt2Pattern, "ByteLevel regex") {}

  void pre_tokenize(PreTokenized& pt) const override {
    thread_local std::vector<Match> matches;
    thread_local std::vector<Segment> segments;
    thread_local std::string prefixed;
    const auto& chars = byte_level_chars();
    // Splitting and byte mapping are done together: each emitted slice is written mapped.
    pt.rewrite([&](std::string_view s, const Span& span_in, SpanWriter& out) {
      Span span = span_in;
      std::string_view text = s;
      if (add_prefix_space_ && (s.empty() || s[0] != ' ')) {
        prefixed.clear();
        prefixed.push_back(' ');
        prefixed.append(s);
        text = prefixed;
        if (span.origin_prefix > 0)
          span.origin_prefix += 1;  // the space aligns with the first char
      }
      auto emit_mapped = [&](size_t b, size_t e, bool at_origin, uint32_t origin_prefix) {
        if (e <= b) return;
        const size_t mark = out.mark();
        std::string& t = out.text();
        uint32_t prefix = 0;
        for (size_t i = b; i < e; ++i) {
          const std::string& c = chars[static_cast<unsigned char>(text[i])];  // 1 or 2 bytes
          t.push_back(c[0]);
          if (c.size() > 1) t.push_back(c[1]);
          if (i - b < origin_prefix) prefix = static_cast<uint32_t>(t.size() - mark);
        }
        out.end_span(mark, at_origin, prefix);
      };
      if (!use_regex_) {
        emit_mapped(0, text.size(), span.at_origin, span.origin_prefix);
        return;
      }
      matches.clear();
      regex_.find_all(text, matches);
      segments_from_matches(matches, text.size(), segments);
      // Isolated: every segment is a slice.
      for (const Segment& seg : segments) {
        if (seg.end <= seg.begin) continue;
        const bool at_origin = seg.begin < span.origin_prefix;
        const uint32_t prefix = at_origin ? std::min(seg.end, span.origin_prefix) - seg.begin : 0;
        emit_mapped(seg.begin, seg.end, at_origin, prefix);
      }
    });
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex regex_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(const JsonNode& node) {
  return std::make_unique<ByteLevelPreTokenizer>(node.bool_or("add_prefix_space", true),
                                                 node.bool_or("use_regex", true));
}

}  // namespace ftune::text
