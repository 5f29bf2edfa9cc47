// Cutting a span at pattern matches, with HF's SplitDelimiterBehavior rules.
//
// A pattern (regex, literal or character class) yields segments that cover the piece in order,
// each flagged as a match or not (HF's Pattern::find_matches). The behavior then decides what
// happens to the matched delimiters, e.g. splitting "the-final--countdown" on '-':
//   Removed            "the" "final" "countdown"
//   Isolated           "the" "-" "final" "-" "-" "countdown"
//   MergedWithPrevious "the-" "final-" "-" "countdown"
//   MergedWithNext     "the" "-final" "-" "-countdown"
//   Contiguous         "the" "-" "final" "--" "countdown"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/pretokenized.h"
#include "text/regex.h"

namespace ftune::text {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext" or "Contiguous" (as serialized in
// tokenizer.json); anything else raises InputError naming `where`.
SplitBehavior parse_split_behavior(const std::string& name, const std::string& where);

struct Segment {
  uint32_t begin, end;
  bool is_match;
};

// HF's find_matches for a regex: the gaps between matches and the matches themselves, covering
// [0, n). An empty piece yields a single non-match (0, 0).
void segments_from_matches(const std::vector<Match>& matches, size_t n, std::vector<Segment>& out);

// HF's find_matches for a character predicate: every matching character is its own segment.
template <class Pred>
void segments_from_predicate(std::string_view s, Pred&& pred, std::vector<Segment>& out);

// Applies `behavior` (after flipping the flags when `invert`) and emits the resulting slices of
// `piece` (a span's text) as children of `parent`.
void split_segments(std::string_view piece, const Span& parent, std::vector<Segment>& segments,
                    bool invert, SplitBehavior behavior, SpanWriter& out);

}  // namespace ftune::text

#include "text/utf8.h"

namespace ftune::text {

template <class Pred>
void segments_from_predicate(std::string_view s, Pred&& pred, std::vector<Segment>& out) {
  out.clear();
  if (s.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t last = 0, i = 0;
  while (i < s.size()) {
    const size_t b = i;
    const char32_t c = utf8_next(s, i);
    if (pred(c)) {
      if (last < b) out.push_back({static_cast<uint32_t>(last), static_cast<uint32_t>(b), false});
      out.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(i), true});
      last = i;
    }
  }
  if (last < s.size())
    out.push_back({static_cast<uint32_t>(last), static_cast<uint32_t>(s.size()), false});
}

}  // namespace ftune::text
