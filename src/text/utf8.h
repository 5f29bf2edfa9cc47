// UTF-8 decoding and encoding for the tokenizer hot paths, and the policy for invalid input.
//
// Every string inside the tokenizer pipeline is valid UTF-8: Tokenizer::encode first checks its
// input and replaces each maximal invalid subsequence with U+FFFD (the same rule as Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace"), Unicode §3.9 "U+FFFD
// substitution of maximal subparts"). Surrogate code points (ED A0..ED BF) and overlong forms
// are invalid. After that, the decoders below may assume valid input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ftune::text {

// Length in bytes of the UTF-8 sequence starting with lead byte `b` (valid input only).
inline int utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

// Decodes the code point at s[i] (valid UTF-8) and advances i past it.
inline char32_t utf8_next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const unsigned char b = p[0];
  if (b < 0x80) {
    i += 1;
    return b;
  }
  if (b < 0xE0) {
    i += 2;
    return (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    i += 3;
    return (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  i += 4;
  return (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

// Decodes the code point that ends at s[i-1] (valid UTF-8) and moves i back to its start.
inline char32_t utf8_prev(std::string_view s, size_t& i) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  size_t k = j;
  const char32_t c = utf8_next(s, k);
  i = j;
  return c;
}

inline int utf8_encoded_len(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

inline void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

inline std::string utf8_encode(char32_t c) {
  std::string s;
  utf8_append(s, c);
  return s;
}

// Number of code points in valid UTF-8.
size_t utf8_count(std::string_view s);

// Byte offset of the first invalid sequence in `s`, or npos when `s` is valid UTF-8.
size_t utf8_find_invalid(std::string_view s);

// `s` with each maximal invalid subsequence replaced by U+FFFD (see the policy above).
std::string utf8_sanitize(std::string_view s);

// True when every byte is ASCII (fast path for normalizers).
bool is_ascii(std::string_view s);

}  // namespace ftune::text
