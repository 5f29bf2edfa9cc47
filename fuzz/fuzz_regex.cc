// Fuzzes the Oniguruma-to-PCRE2 translation and the match iteration: input = pattern, NUL, text.
// Invalid patterns must raise InputError; matches must be ordered, non-overlapping, inside the
// text and on character boundaries.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/regex.h"
#include "text/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  if (cut == std::string_view::npos) return 0;
  const std::string pattern = ftune::text::utf8_sanitize(in.substr(0, cut));
  const std::string text = ftune::text::utf8_sanitize(in.substr(cut + 1));
  try {
    const ftune::text::Regex re(pattern, "fuzz");
    std::vector<ftune::text::Match> matches;
    re.find_all(text, matches);
    uint32_t last_end = 0;
    bool first = true;
    for (const auto& [b, e] : matches) {
      auto boundary = [&](uint32_t i) {
        return i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
      };
      if (b > e || e > text.size() || (!first && b < last_end) || !boundary(b) || !boundary(e)) {
        std::fprintf(stderr, "bad match [%u, %u) of %zu bytes\n", b, e, text.size());
        std::abort();
      }
      last_end = e;
      first = false;
    }
  } catch (const ftune::InputError&) {
  } catch (const ftune::Error&) {
    // PCRE2 resource limits (match limit) on pathological patterns
  }
  return 0;
}
