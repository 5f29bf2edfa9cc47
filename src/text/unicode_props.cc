// ICU-backed character classes at the Unicode versions HF's Rust crates use (see the header).
#include "text/unicode_props.h"

#include <unicode/uchar.h>
#include <unicode/uversion.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/utf8.h"

namespace ftune::text::unicode {

namespace {

// The Unicode version in which c was assigned, as major * 10 + minor (0: unassigned in ICU).
int age_of(UChar32 c) {
  UVersionInfo age;
  u_charAge(c, age);
  return age[0] * 10 + age[1];
}

bool contains(std::initializer_list<char32_t> list, char32_t c) {
  for (char32_t x : list)
    if (x == c) return true;
  return false;
}

// General-category changes since Unicode 8.0 / 9.0 for characters that already existed then
// (from the Unicode change history, confirmed by probing HF):
//   U+166D CANADIAN SYLLABICS CHI SIGN: Po until 11.0, So since 12.0.
//   U+111C9 SHARADA SANDHI MARK: Po in 8.0, Mn since 11.0.
//   U+1734 HANUNOO SIGN PAMUDPOD: Mn until 13.0, Mc since 14.0.
//   U+1885, U+1886 MONGOLIAN LETTER ALI GALI BALUDA / THREE BALUDA: Lo until 8.0, Mn since 9.0.
//   U+A9BD JAVANESE CONSONANT SIGN KERET: Mc until 11.0, Mn since 12.0.
//   U+1CF2, U+1CF3 VEDIC SIGN ARDHAVISARGA / ROTATED ARDHAVISARGA: Mc until 9.0, Lo since 10.0.
uint16_t compute_flags(UChar32 c) {
  if (c >= 0xD800 && c <= 0xDFFF) return 0;
  const int age = age_of(c);
  const uint32_t gc = U_GET_GC_MASK(c);
  const bool by_8_0 = age != 0 && age <= 80, by_9_0 = age != 0 && age <= 90;
  uint16_t f = 0;
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) f |= kWhiteSpace;

  bool punct = by_8_0 && (gc & U_GC_P_MASK);
  if (c < 0x80)
    punct = c > 0x20 && c < 0x7F &&
            !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
  if (contains({0x166D, 0x111C9}, c)) punct = true;
  if (punct) f |= kPunctuation;

  if (by_8_0 && (gc & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK | U_GC_CS_MASK))) f |= kOther;

  bool mn = by_8_0 && (gc & U_GC_MN_MASK);
  if (c == 0x1734) mn = true;
  if (contains({0x1885, 0x1886, 0xA9BD, 0x111C9}, c)) mn = false;
  if (mn) f |= kMarkNonspacing;

  bool mark = by_9_0 && (gc & U_GC_M_MASK);
  if (contains({0x1CF2, 0x1CF3}, c)) mark = true;
  if (c == 0x111C9) mark = false;
  if (mark) f |= kCombiningMark;

  if (gc & U_GC_N_MASK) f |= kNumeric;
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
      (gc & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
      u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL))
    f |= kWord;
  return f;
}

// Two-stage table: stage1[c >> 8] is the index of a 256-entry block in stage2; identical blocks
// are shared (a few hundred distinct blocks for the whole code space).
struct Table {
  std::vector<uint16_t> stage1;
  std::vector<uint16_t> stage2;
  detail::FlagTable view;
};

const Table& table() {
  static const Table t = [] {
    Table tab;
    tab.stage1.resize(0x110000 >> 8);
    std::unordered_map<std::string, uint16_t> seen;
    std::vector<uint16_t> block(256);
    for (UChar32 hi = 0; hi < (0x110000 >> 8); ++hi) {
      for (int lo = 0; lo < 256; ++lo) block[lo] = compute_flags((hi << 8) | lo);
      std::string key(reinterpret_cast<const char*>(block.data()), 256 * sizeof(uint16_t));
      auto [it, inserted] =
          seen.emplace(std::move(key), static_cast<uint16_t>(tab.stage2.size() / 256));
      if (inserted) tab.stage2.insert(tab.stage2.end(), block.begin(), block.end());
      tab.stage1[hi] = it->second;
    }
    tab.view = {tab.stage1.data(), tab.stage2.data()};
    return tab;
  }();
  return t;
}

}  // namespace

namespace detail {

std::atomic<const FlagTable*> g_flag_table{nullptr};

const FlagTable* build_flag_table() {
  const FlagTable* t = &table().view;
  g_flag_table.store(t, std::memory_order_release);
  return t;
}

}  // namespace detail

void append_lowercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  if (c == 0x130) {
    out.append("i\xCC\x87");  // "i" + U+0307 COMBINING DOT ABOVE
    return;
  }
  utf8_append(out, static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
}

std::string icu_unicode_version() {
  UVersionInfo v;
  u_getUnicodeVersion(v);
  return std::to_string(v[0]) + "." + std::to_string(v[1]);
}

}  // namespace ftune::text::unicode
