// The string being tokenized, cut into spans as it moves through the pipeline.
//
// HF's PreTokenizedString keeps one NormalizedString (with a byte alignment table) per split; we
// keep one text buffer and a list of spans into it, and rewrite both into a second buffer at each
// pre-tokenization step, so encoding allocates nothing once the buffers have grown.
//
// Only one piece of HF's alignment bookkeeping changes token ids: Metaspace with
// prepend_scheme "first" prepends "▁" only to a split whose offsets_original().0 is 0. Each span
// therefore carries `at_origin` (that condition) and `origin_prefix`: how many of its leading
// bytes HF aligns to original offset 0. HF's alignment starts never decrease along a string, so
// these bytes always form a prefix. A sub-span cut at byte b of its parent starts at the origin
// exactly when b < parent.origin_prefix.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ftune::text {

struct Span {
  uint32_t begin = 0, end = 0;  // byte range in the owning text buffer
  int32_t id = -1;              // >= 0: an added token, final (never normalized or split again)
  uint32_t origin_prefix = 0;   // leading bytes aligned to original offset 0 (see above)
  bool at_origin = false;       // HF: offsets_original().0 == 0
};

// Builds the next generation of (text, spans).
class SpanWriter {
 public:
  SpanWriter(std::string& text, std::vector<Span>& spans) : text_(text), spans_(spans) {}

  // Appends `piece` as a span with the given origin information; empty pieces are dropped, as HF
  // drops empty splits.
  void emit(std::string_view piece, bool at_origin, uint32_t origin_prefix) {
    if (piece.empty()) return;
    const auto b = static_cast<uint32_t>(text_.size());
    text_.append(piece);
    spans_.push_back(Span{b, static_cast<uint32_t>(text_.size()), -1, origin_prefix, at_origin});
  }

  // Appends the slice [b, e) of `parent_text` as a new span, deriving its origin information
  // from the parent span the way HF's NormalizedString::slice does.
  void emit_slice(std::string_view parent_text, const Span& parent, size_t b, size_t e) {
    if (e <= b) return;
    const bool at_origin = b < parent.origin_prefix;
    const auto prefix =
        at_origin ? static_cast<uint32_t>(std::min<size_t>(e, parent.origin_prefix) - b) : 0u;
    emit(parent_text.substr(b, e - b), at_origin, prefix);
  }

  // Starts a span whose text the caller appends to text(); close it with end_span().
  std::string& text() { return text_; }
  size_t mark() const { return text_.size(); }
  void end_span(size_t mark, bool at_origin, uint32_t origin_prefix) {
    if (text_.size() == mark) return;
    spans_.push_back(Span{static_cast<uint32_t>(mark), static_cast<uint32_t>(text_.size()), -1,
                          origin_prefix, at_origin});
  }

  void emit_token(int32_t id) {
    spans_.push_back(Span{static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(text_.size()),
                          id, 0, false});
  }

 private:
  std::string& text_;
  std::vector<Span>& spans_;
};

class PreTokenized {
 public:
  // One span holding `input`, aligned like HF's fresh NormalizedString: it starts at the origin
  // and its first character is the origin prefix.
  void reset(std::string_view input);

  std::string_view view(const Span& s) const {
    return std::string_view(text).substr(s.begin, s.end - s.begin);
  }

  // Rewrites every span that is not an added token with f(piece, span, writer); added-token spans
  // are carried over unchanged. The result replaces text and spans.
  template <class F>
  void rewrite(F&& f) {
    next_text_.clear();
    next_spans_.clear();
    SpanWriter w(next_text_, next_spans_);
    for (const Span& s : spans) {
      if (s.id >= 0) {
        w.emit_token(s.id);
        continue;
      }
      f(view(s), s, w);
    }
    text.swap(next_text_);
    spans.swap(next_spans_);
  }

  std::string text;
  std::vector<Span> spans;

 private:
  std::string next_text_;
  std::vector<Span> next_spans_;
};

}  // namespace ftune::text
