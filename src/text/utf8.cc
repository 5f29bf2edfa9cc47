// UTF-8 validation and lossy repair (see utf8.h for the policy).
#include "text/utf8.h"

#include <cstring>

namespace ftune::text {

namespace {

// Length of the valid sequence starting at p[0] (n bytes available), or 0 when the bytes at p do
// not start a valid sequence. On 0, *bad is set to the length of the maximal subpart to replace
// (at least 1): the longest prefix that could still have been completed to a valid sequence.
int valid_sequence(const unsigned char* p, size_t n, size_t* bad) {
  const unsigned char b = p[0];
  if (b < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;  // no overlongs
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *bad = 1;
    return 0;
  }
  size_t i = 1;
  for (; i < static_cast<size_t>(len); ++i) {
    if (i >= n) break;
    const unsigned char c = p[i];
    const bool ok = i == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
  }
  if (i == static_cast<size_t>(len)) return len;
  *bad = i;  // the lead byte plus the continuation bytes that were still plausible
  return 0;
}

}  // namespace

size_t utf8_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_ascii(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size(), i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) return false;
  }
  for (; i < n; ++i)
    if (static_cast<unsigned char>(p[i]) >= 0x80) return false;
  return true;
}

size_t utf8_find_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Skip ASCII runs quickly.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t bad = 0;
    const int len = valid_sequence(p + i, n - i, &bad);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string utf8_sanitize(std::string_view s) {
  const size_t first = utf8_find_invalid(s);
  if (first == std::string_view::npos) return std::string(s);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  std::string out;
  out.reserve(n + 16);
  out.append(s.data(), first);
  size_t i = first;
  while (i < n) {
    size_t bad = 0;
    const int len = valid_sequence(p + i, n - i, &bad);
    if (len > 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += bad;
    }
  }
  return out;
}

}  // namespace ftune::text
