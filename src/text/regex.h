// Regular expressions for Split / Replace patterns, with Oniguruma semantics on PCRE2.
//
// HF `tokenizers` compiles tokenizer.json patterns with Oniguruma (Ruby syntax, UTF-8). We run
// them on PCRE2 (JIT-compiled, UTF + UCP) after translating the constructs whose meaning differs:
//   \s \S  -> \p{White_Space} / \P{White_Space}   (Oniguruma's \s is White_Space; PCRE2's is not)
//   \w \W  -> Oniguruma's word class: Alphabetic, Mark, Nd, Pc and U+00B2 U+00B3 U+00B9 U+00BC-BE
//   \d \D  -> \p{Nd} / \P{Nd}
//   \h \H  -> hex digit [0-9a-fA-F] (PCRE2's \h is horizontal space)
//   \b \B  -> word boundaries over Oniguruma's word class ([\b] stays a backspace)
//   [:alpha:] [:digit:] [:alnum:] [:space:] [:upper:] [:lower:] [:word:] -> Unicode properties
//   \uHHHH -> \x{HHHH}
//   (?m)   -> (?s)   (Ruby's m flag is "dot matches newline"); ^ and $ are always line anchors
// Iteration over matches follows the onig crate's find_iter: after a non-empty match, the next
// empty match is skipped, and an empty match advances the search by one character.
// \W inside a character class has no PCRE2 equivalent and is rejected with an InputError, as is
// \C (one byte, which would cut UTF-8 characters).
//
// Unicode classes (\p{L}, \p{N}, ...) come from PCRE2's tables (Unicode 14.0 for PCRE2 10.42);
// HF's Oniguruma has Unicode 16.0, so characters assigned after 14.0 may be classed differently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/json_node.h"

namespace ftune::text {

// A match: [start, end) byte offsets.
using Match = std::pair<uint32_t, uint32_t>;

class Regex {
 public:
  // Compiles an Oniguruma pattern; `where` names it in errors ("tokenizer.json: pre_tokenizer...").
  Regex(std::string_view onig_pattern, const std::string& where);
  // A pattern matching `literal` exactly (HF escapes String patterns with regex::escape).
  static Regex literal(std::string_view literal);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Appends every match in `text` (valid UTF-8) to `out`, in order, non-overlapping.
  void find_all(std::string_view text, std::vector<Match>& out) const;

  // The translated PCRE2 pattern (for tests and error messages).
  const std::string& pcre2_pattern() const { return translated_; }

 private:
  Regex() = default;
  struct Compiled;
  std::string literal_;     // non-empty: plain substring search, no regex engine
  std::string translated_;  // the PCRE2 pattern
  std::unique_ptr<Compiled> compiled_;
};

// A tokenizer.json pattern: {"String": "..."} (a literal) or {"Regex": "..."} (Oniguruma).
Regex make_pattern(const JsonNode& pattern);

// Translates an Oniguruma (Ruby syntax) pattern to PCRE2 (see above); throws InputError naming
// `where` for constructs that cannot be translated.
std::string onig_to_pcre2(std::string_view pattern, const std::string& where);

}  // namespace ftune::text
