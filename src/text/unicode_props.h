// Character classes exactly as Hugging Face `tokenizers` (Rust) sees them, computed with ICU.
//
// HF's crates each carry Unicode tables of a different age, and those ages decide token ids:
//   - Rust std (char::is_whitespace, is_numeric, to_lowercase) and the `regex` crate's \w:
//     current Unicode (ICU 72 here: Unicode 15.0).
//   - crate `unicode_categories` (BERT punctuation, BertNormalizer's "control" filter and its Mn
//     filter for strip_accents): Unicode 8.0. A character added later is "unassigned" to it, so
//     e.g. U+2E43 (Unicode 9) is not punctuation for BertPreTokenizer.
//   - crate `unicode-normalization-alignments` (NFC/NFD/NFKC/NFKD and StripAccents'
//     is_combining_mark): Unicode 9.0 (see unicode_normalize.h).
// We take the current properties from ICU and restrict them with ICU's u_charAge to the version
// each crate uses; the handful of characters whose general category changed since then are
// listed in unicode_props.cc. tests/text/unicode_props_test.cc checks every code point against
// tables probed from HF. Characters assigned after Unicode 15.0 (ICU 72) are the one known
// divergence: HF (Unicode 16) knows their case and class, we do not.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace ftune::text::unicode {

enum Flag : uint16_t {
  kWhiteSpace = 1 << 0,      // White_Space (Rust char::is_whitespace, regex \s)
  kPunctuation = 1 << 1,     // ASCII punctuation or General_Category P* as of Unicode 8.0
  kOther = 1 << 2,           // Cc, Cf, Co, Cs as of Unicode 8.0 (unicode_categories::is_other)
  kMarkNonspacing = 1 << 3,  // Mn as of Unicode 8.0 (BertNormalizer strip_accents)
  kCombiningMark = 1 << 4,   // M* as of Unicode 9.0 (StripAccents normalizer)
  kNumeric = 1 << 5,         // N* (Rust char::is_numeric; Digits pre-tokenizer)
  kWord = 1 << 6,            // Rust regex \w: Alphabetic, M*, Nd, Pc, Join_Control
};

namespace detail {
// Two-stage flag table (see unicode_props.cc), built from ICU at start-up or on first use.
struct FlagTable {
  const uint16_t* stage1;  // code point >> 8 -> block
  const uint16_t* stage2;  // block * 256 + (code point & 0xFF) -> flags
};
extern std::atomic<const FlagTable*> g_flag_table;
const FlagTable* build_flag_table();
}  // namespace detail

// Flags of code point c (0 for c > U+10FFFF).
inline uint16_t flags(char32_t c) {
  if (c >= 0x110000) return 0;
  const detail::FlagTable* t = detail::g_flag_table.load(std::memory_order_acquire);
  if (!t) t = detail::build_flag_table();
  return t->stage2[size_t(t->stage1[c >> 8]) * 256 + (c & 0xFF)];
}

inline bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return flags(c) & kWhiteSpace;
}
inline bool is_punctuation(char32_t c) {
  return flags(c) & kPunctuation;
}
inline bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return flags(c) & kNumeric;
}
inline bool is_word(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return flags(c) & kWord;
}

// BertNormalizer's classes (crate tokenizers, normalizers/bert.rs).
inline bool is_bert_whitespace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || is_whitespace(c);
}
inline bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return flags(c) & kOther;
}
// The CJK blocks BERT isolates with spaces (handle_chinese_chars).
inline bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Appends Rust's char::to_lowercase(c): the simple lowercase mapping, except U+0130 (capital I
// with dot above) whose unconditional full mapping is "i" + U+0307. No context (no final sigma).
void append_lowercase(std::string& out, char32_t c);

// Unicode version of the ICU tables in use, e.g. "15.0".
std::string icu_unicode_version();

}  // namespace ftune::text::unicode
