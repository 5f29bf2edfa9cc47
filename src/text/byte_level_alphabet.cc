// The GPT-2 byte-to-character table (see byte_level_alphabet.h).
#include "text/byte_level_alphabet.h"

#include "text/utf8.h"

namespace ftune::text {

namespace {

struct Alphabet {
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> byte_of;  // indexed by code point, all table characters are < 324
  Alphabet() {
    byte_of.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      chars[b] = utf8_encode(c);
      byte_of[c] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  return alphabet().chars;
}

int byte_level_byte(char32_t c) {
  return c < 324 ? alphabet().byte_of[c] : -1;
}

}  // namespace ftune::text
