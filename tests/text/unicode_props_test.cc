// Every code point against HF: the character classes and single-character mappings that HF's
// Rust crates apply (probed through the tokenizers API by tools/make_tokenizer_fixtures.py) must
// equal ours for every character ICU knows (Unicode 15.0; PCRE2's regex classes: 14.0). The
// characters assigned later (Unicode 15.1 / 16.0, which HF's crates know) are the documented
// divergence: they are counted and printed, not failed.
#include <gtest/gtest.h>
#include <unicode/uchar.h>

#include <map>

#include "text/regex.h"
#include "text/tokenizer_fixtures.h"
#include "text/unicode_normalize.h"
#include "text/unicode_props.h"
#include "text/utf8.h"

namespace ftune::text {
namespace {

using nlohmann::json;

// Unicode version (major * 10 + minor) in which c was assigned, 0 when ICU does not know it.
int icu_age(char32_t c) {
  UVersionInfo v;
  u_charAge(static_cast<UChar32>(c), v);
  return v[0] * 10 + v[1];
}

bool is_surrogate(char32_t c) {
  return c >= 0xD800 && c <= 0xDFFF;
}

const json& probe() {
  static const json p =
      test::read_jsonl_gz(test::tokenizer_fixtures_dir() + "/unicode_probe.jsonl.gz").at(0);
  return p;
}

std::vector<bool> hf_set(const std::string& name) {
  std::vector<bool> in(0x110000, false);
  for (const auto& r : probe().at("sets").at(name))
    for (uint32_t c = r[0]; c <= r[1].get<uint32_t>(); ++c) in[c] = true;
  return in;
}

// Compares `ours` with HF's set `name`; mismatches on characters newer than `max_age` (or
// unknown to ICU) are tolerated and reported.
template <class F>
void compare_class(const std::string& name, F ours, int max_age) {
  const auto hf = hf_set(name);
  size_t tolerated = 0, failures = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (is_surrogate(c)) continue;
    if (ours(c) == hf[c]) continue;
    const int age = icu_age(c);
    if (age == 0 || age > max_age) {
      ++tolerated;
      continue;
    }
    if (failures++ < 10)
      ADD_FAILURE() << name << ": U+" << std::hex << uint32_t(c) << " ours " << ours(c) << " HF "
                    << hf[c];
  }
  std::printf("[ unicode ] %-14s mismatches on characters newer than the library: %zu\n",
              name.c_str(), tolerated);
  EXPECT_EQ(failures, 0u) << name;
}

TEST(UnicodeProps, WhitespacePunctuationControlMarksNumericWord) {
  compare_class("whitespace", unicode::is_whitespace, 150);
  compare_class("punctuation", unicode::is_punctuation, 150);
  compare_class(
      "bert_control",
      [](char32_t c) { return c == 0 || c == 0xFFFD || unicode::is_bert_control(c); }, 150);
  compare_class(
      "combining_mark",
      [](char32_t c) { return (unicode::flags(c) & unicode::kCombiningMark) != 0; }, 150);
  compare_class("numeric", unicode::is_numeric, 150);
  // The probe of \w runs on "x" + c, so "x" itself was not probed.
  compare_class(
      "rust_word", [](char32_t c) { return c == 'x' ? false : unicode::is_word(c); }, 150);
}

TEST(UnicodeProps, BertNonspacingMarks) {
  // Probed only for characters NFD leaves alone (the others are decomposed before the filter).
  const auto hf = hf_set("bert_mn");
  size_t failures = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (is_surrogate(c) || icu_age(c) == 0) continue;
    std::string nfd;
    normalize_unicode(NormForm::kNFD, utf8_encode(c), nfd);
    if (nfd != utf8_encode(c)) continue;
    const bool ours = unicode::flags(c) & unicode::kMarkNonspacing;
    if (ours != hf[c] && failures++ < 10) ADD_FAILURE() << "bert_mn U+" << std::hex << uint32_t(c);
  }
  EXPECT_EQ(failures, 0u);
}

TEST(UnicodeProps, OnigurumaClassesOnPcre2) {
  // One subject holding every code point ICU knows, each followed by U+0001.
  std::string subject;
  std::map<uint32_t, char32_t> start_of;
  for (char32_t c = 2; c < 0x110000; ++c) {
    if (is_surrogate(c)) continue;
    start_of[static_cast<uint32_t>(subject.size())] = c;
    utf8_append(subject, c);
    subject.push_back('\x01');
  }
  const std::map<std::string, std::string> classes = {{"onig_L", "\\p{L}"}, {"onig_N", "\\p{N}"},
                                                      {"onig_M", "\\p{M}"}, {"onig_s", "\\s"},
                                                      {"onig_w", "\\w"},    {"onig_d", "\\d"}};
  for (const auto& [name, pattern] : classes) {
    const Regex re(pattern, name);
    std::vector<Match> matches;
    re.find_all(subject, matches);
    std::vector<bool> ours(0x110000, false);
    for (const Match& m : matches) {
      auto it = start_of.find(m.first);
      ASSERT_NE(it, start_of.end()) << name << " matched inside a character";
      ours[it->second] = true;
    }
    compare_class(
        name, [&](char32_t c) { return c >= 2 && ours[c]; }, 140);
  }
}

TEST(UnicodeProps, LowercaseAndNormalizationMaps) {
  const json& maps = probe().at("maps");
  const std::map<std::string, NormForm> forms = {{"nfd", NormForm::kNFD},
                                                 {"nfkd", NormForm::kNFKD},
                                                 {"nfc", NormForm::kNFC},
                                                 {"nfkc", NormForm::kNFKC}};
  for (const std::string name : {"lowercase", "nfd", "nfkd", "nfc", "nfkc"}) {
    const json& m = maps.at(name);
    size_t failures = 0, tolerated = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
      if (is_surrogate(c)) continue;
      const std::string in = utf8_encode(c);
      std::string ours;
      if (name == "lowercase")
        unicode::append_lowercase(ours, c);
      else
        normalize_unicode(forms.at(name), in, ours);
      auto it = m.find(std::to_string(uint32_t(c)));
      const std::string hf = it == m.end() ? in : it->get<std::string>();
      if (ours == hf) continue;
      if (icu_age(c) == 0) {
        ++tolerated;
        continue;
      }
      if (failures++ < 10) ADD_FAILURE() << name << ": U+" << std::hex << uint32_t(c);
    }
    std::printf("[ unicode ] %-14s mismatches on characters newer than the library: %zu\n",
                name.c_str(), tolerated);
    EXPECT_EQ(failures, 0u) << name;
  }
}

}  // namespace
}  // namespace ftune::text
