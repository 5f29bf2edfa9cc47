// SplitDelimiterBehavior, as in HF's NormalizedString::split (see split.h).
#include "text/split.h"

#include <algorithm>

#include "core/error.h"

namespace ftune::text {

SplitBehavior parse_split_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw InputError(
      where + ": unknown split behavior \"" + name +
      "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

void segments_from_matches(const std::vector<Match>& matches, size_t n, std::vector<Segment>& out) {
  out.clear();
  if (n == 0) {
    out.push_back({0, 0, false});
    return;
  }
  uint32_t prev = 0;
  for (const Match& m : matches) {
    if (prev != m.first) out.push_back({prev, m.first, false});
    out.push_back({m.first, m.second, true});
    prev = m.second;
  }
  if (prev != n) out.push_back({prev, static_cast<uint32_t>(n), false});
}

void split_segments(std::string_view piece, const Span& parent, std::vector<Segment>& segs,
                    bool invert, SplitBehavior behavior, SpanWriter& out) {
  if (invert)
    for (Segment& s : segs) s.is_match = !s.is_match;

  // Each kept slice: (begin, end). `segs` is rewritten in place into the slices to emit, with
  // is_match meaning "remove".
  size_t k = 0;  // number of output entries
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (Segment& s : segs) s.is_match = false;
      k = segs.size();
      break;
    case SplitBehavior::kRemoved:
      k = segs.size();
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment s : segs) {  // by value: segs is rewritten in place
        if (s.is_match == previous_match && k > 0) {
          segs[k - 1].end = s.end;
        } else {
          segs[k++] = {s.begin, s.end, false};
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment s : segs) {  // by value: segs is rewritten in place
        if (s.is_match && !previous_match && k > 0) {
          segs[k - 1].end = s.end;
        } else {
          segs[k++] = {s.begin, s.end, false};
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // HF folds from the right: a match that follows a non-match (reading right to left) is
      // merged into the segment after it.
      bool previous_match = false;
      thread_local std::vector<Segment> rev;
      rev.clear();
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !rev.empty()) {
          rev.back().begin = it->begin;
        } else {
          rev.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(rev.begin(), rev.end());
      k = rev.size();
      std::copy(rev.begin(), rev.end(), segs.begin());
      break;
    }
  }
  for (size_t i = 0; i < k; ++i) {
    if (segs[i].is_match) continue;  // removed delimiter
    out.emit_slice(piece, parent, segs[i].begin, segs[i].end);
  }
}

}  // namespace ftune::text
