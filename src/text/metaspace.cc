// Metaspace pre-tokenizer (SentencePiece style): replace every ' ' with the replacement
// character (usually "▁"), prepend one according to prepend_scheme (always; first = only to the
// piece that starts the original input; never), and optionally split before each replacement
// character (MergedWithNext).
#include <memory>
#include <vector>

#include "core/error.h"
#include "text/pre_tokenizer.h"
#include "text/split.h"
#include "text/utf8.h"

namespace ftune::text {

namespace {

enum class Prepend { kAlways, kFirst, kNever };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, Prepend scheme, bool split)
      : replacement_(replacement), rep_(utf8_encode(replacement)), scheme_(scheme), split_(split) {}

  void pre_tokenize(PreTokenized& pt) const override {
    thread_local std::string buf;
    thread_local std::vector<Segment> segments;
    pt.rewrite([&](std::string_view s, const Span& span, SpanWriter& out) {
      buf.clear();
      uint32_t prefix = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == ' ')
          buf.append(rep_);
        else
          buf.push_back(s[i]);
        if (i < span.origin_prefix) prefix = static_cast<uint32_t>(buf.size());
      }
      const bool starts_with_rep = buf.compare(0, rep_.size(), rep_) == 0;
      const bool prepend =
          !buf.empty() && !starts_with_rep &&
          (scheme_ == Prepend::kAlways || (scheme_ == Prepend::kFirst && span.at_origin));
      if (prepend) {
        buf.insert(0, rep_);
        if (prefix > 0) prefix += static_cast<uint32_t>(rep_.size());
      }
      Span piece{0, static_cast<uint32_t>(buf.size()), -1, prefix, span.at_origin};
      if (!split_) {
        out.emit(buf, piece.at_origin, piece.origin_prefix);
        return;
      }
      segments_from_predicate(
          buf, [&](char32_t c) { return c == replacement_; }, segments);
      split_segments(buf, piece, segments, false, SplitBehavior::kMergedWithNext, out);
    });
  }

 private:
  char32_t replacement_;
  std::string rep_;
  Prepend scheme_;
  bool split_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(const JsonNode& node) {
  const JsonNode rep = node.at("replacement");
  const std::string r = rep.as_string();
  if (r.empty() || utf8_count(r) != 1) rep.fail("a single character");
  size_t i = 0;
  const char32_t replacement = utf8_next(r, i);
  Prepend scheme = Prepend::kAlways;
  if (auto p = node.get("prepend_scheme")) {
    const std::string v = p->as_string();
    if (v == "always")
      scheme = Prepend::kAlways;
    else if (v == "first")
      scheme = Prepend::kFirst;
    else if (v == "never")
      scheme = Prepend::kNever;
    else
      p->fail_msg("unknown prepend_scheme \"" + v + "\" (expected always, first or never)");
  }
  // Legacy files carry add_prefix_space instead; false means never.
  if (auto a = node.get("add_prefix_space"); a && !a->as_bool()) {
    if (node.has("prepend_scheme") && scheme != Prepend::kNever)
      a->fail_msg("add_prefix_space does not match declared prepend_scheme");
    scheme = Prepend::kNever;
  }
  return std::make_unique<Metaspace>(replacement, scheme, node.bool_or("split", true));
}

}  // namespace ftune::text
