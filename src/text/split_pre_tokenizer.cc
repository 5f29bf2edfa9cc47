// Split pre-tokenizer: cut at the matches of a literal or Oniguruma regex pattern, with a split
// behavior, optionally inverted (keep the matches, cut at the rest).
#include <memory>
#include <vector>

#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/split.h"

namespace ftune::text {

namespace {

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(PreTokenized& pt) const override {
    thread_local std::vector<Match> matches;
    thread_local std::vector<Segment> segments;
    pt.rewrite([&](std::string_view s, const Span& span, SpanWriter& out) {
      matches.clear();
      pattern_.find_all(s, matches);
      segments_from_matches(matches, s.size(), segments);
      split_segments(s, span, segments, invert_, behavior_, out);
    });
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(const JsonNode& node) {
  const JsonNode behavior = node.at("behavior");
  return std::make_unique<SplitPreTokenizer>(
      make_pattern(node.at("pattern")), parse_split_behavior(behavior.as_string(), behavior.path()),
      node.bool_or("invert", false));
}

}  // namespace ftune::text
