// Words of a closed choice: the joined list and the "did you mean" hint (see choice.h).
#include "core/choice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace ftune {

std::string either(const std::vector<std::string>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i)
    s += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_word(std::string_view typed, const std::vector<std::string>& words,
                         size_t max_edits) {
  std::string best;
  size_t best_d = max_edits + 1;
  for (const std::string& w : words)
    if (size_t d = edit_distance(typed, w); d < best_d) best_d = d, best = w;
  return best;
}

std::string did_you_mean(std::string_view typed, const std::vector<std::string>& words) {
  const std::string near = closest_word(typed, words, 2);
  if (near.empty() || near == typed) return "";
  return " (did you mean '" + near + "'?)";
}

void throw_not_a_choice(const std::string& where, std::string_view word,
                        const std::vector<std::string>& words) {
  throw InputError(fmt::format("{} must be one of {}, got '{}'{}", where, fmt::join(words, ", "),
                               word, did_you_mean(word, words)));
}

}  // namespace ftune
