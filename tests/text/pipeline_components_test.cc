// Components one by one against values from HF tokenizers 0.23.3 (pre_tokenize_str /
// normalize_str): split behaviors, Oniguruma match iteration and syntax translation,
// pre-tokenizers, normalizers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/regex.h"

namespace ftune::text {
namespace {

using Words = std::vector<std::string>;

Words pre_tokenize(const std::string& json_text, const std::string& input) {
  const nlohmann::json j = nlohmann::json::parse(json_text);
  const auto pt = make_pre_tokenizer(JsonNode(j, "test"));
  PreTokenized p;
  p.reset(input);
  pt->pre_tokenize(p);
  Words out;
  for (const Span& s : p.spans) out.emplace_back(p.view(s));
  return out;
}

std::string normalize(const std::string& json_text, const std::string& input) {
  const nlohmann::json j = nlohmann::json::parse(json_text);
  const auto n = make_normalizer(JsonNode(j, "test"));
  std::string out;
  uint32_t prefix = 1;
  n->normalize(input, prefix, out);
  return out;
}

std::string split(const std::string& pattern_json, const std::string& behavior,
                  bool invert = false) {
  return R"({"type":"Split","pattern":)" + pattern_json + R"(,"behavior":")" + behavior +
         R"(","invert":)" + (invert ? "true" : "false") + "}";
}

TEST(SplitBehavior, AllFiveOnTheFinalCountdown) {
  const std::string s = "the-final--countdown";
  const std::string dash = R"({"String":"-"})";
  EXPECT_EQ(pre_tokenize(split(dash, "Removed"), s), (Words{"the", "final", "countdown"}));
  EXPECT_EQ(pre_tokenize(split(dash, "Isolated"), s),
            (Words{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize(split(dash, "MergedWithPrevious"), s),
            (Words{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize(split(dash, "MergedWithNext"), s),
            (Words{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pre_tokenize(split(dash, "Contiguous"), s),
            (Words{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"\\d+"})", "Removed", true), "ab12cd345e"),
            (Words{"12", "345"}));
  EXPECT_THROW(pre_tokenize(split(dash, "Sideways"), s), InputError);
}

TEST(OnigurumaSemantics, EmptyMatchesIterateLikeTheOnigCrate) {
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"a*"})", "Isolated"), "baaac"),
            (Words{"b", "aaa", "c"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":""})", "Isolated"), "abc"), (Words{"a", "b", "c"}));
  EXPECT_EQ(normalize(R"({"type":"Replace","pattern":{"Regex":""},"content":"-"})", "abc"),
            "-a-b-c-");
}

TEST(OnigurumaSemantics, SyntaxDifferencesAreTranslated) {
  // \h is a hex digit in Ruby syntax, \uHHHH an escape, (?m) makes '.' match newlines, and ^ $
  // are line anchors.
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"\\h+"})", "Isolated"), "xx0aF9yy"),
            (Words{"xx", "0aF9", "yy"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"\\u00e9+"})", "Isolated"), "caf\xC3\xA9\xC3\xA9!"),
            (Words{"caf", "\xC3\xA9\xC3\xA9", "!"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"(?m)a.b"})", "Isolated"), "a\nb acb"),
            (Words{"a\nb", " ", "acb"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"^x|y$"})", "Isolated"), "xay\nxby"),
            (Words{"x", "a", "y", "\n", "x", "b", "y"}));
  // Word boundaries and POSIX brackets use Oniguruma's Unicode definitions (marks and U+00B2 are
  // word characters; [:alpha:] is Alphabetic, so U+0345 and U+216B are letters, U+0301 not).
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"\\b"})", "Isolated"),
                         "ab e\xCC\x81"
                         "f \xC2\xB2x \xE2\x80\xBFw"),
            (Words{"ab", " ",
                   "e\xCC\x81"
                   "f",
                   " ", "\xC2\xB2x", " ", "\xE2\x80\xBFw"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"\\B"})", "Isolated"), "ab c"), (Words{"a", "b c"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"[[:alpha:]]+"})", "Isolated"),
                         "abc\xCC\x81"
                         "d \xC2\xBD \xE2\x85\xAB \xCD\x85x"),
            (Words{"abc", "\xCC\x81", "d", " \xC2\xBD ", "\xE2\x85\xAB", " ", "\xCD\x85x"}));
  EXPECT_EQ(
      pre_tokenize(split(R"({"Regex":"[[:upper:]]+"})", "Isolated"), "ABcD\xC4\xB2\xE2\x85\xA0x"),
      (Words{"AB", "c", "D\xC4\xB2\xE2\x85\xA0", "x"}));
  EXPECT_EQ(
      pre_tokenize(split(R"({"Regex":"[[:alnum:]_]+"})", "Isolated"), "a1 \xD9\xA5\xC2\xB2 x"),
      (Words{"a1", " ", "\xD9\xA5", "\xC2\xB2 ", "x"}));
  EXPECT_EQ(pre_tokenize(split(R"({"Regex":"[\\b]"})", "Isolated"), "a\bb"),
            (Words{"a", "\b", "b"}));
  // \s is White_Space (U+0085 included, U+180E not); \w is Oniguruma's word class.
  std::vector<Match> m;
  Regex("\\s", "t").find_all("\xC2\x85\xE1\xA0\x8E", m);
  EXPECT_EQ(m, (std::vector<Match>{{0, 2}}));
  EXPECT_THROW(Regex("[\\W]", "t"), InputError);
  EXPECT_THROW(Regex("(unclosed", "t"), InputError);
  // Found by fuzz/fuzz_regex: PCRE2's \C matches one byte and cut UTF-8 characters.
  EXPECT_THROW(Regex("\\C'", "t"), InputError);
}

TEST(OnigurumaSemantics, Llama3AndGpt2Patterns) {
  const std::string llama3 =
      R"({"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"})";
  EXPECT_EQ(pre_tokenize(split(llama3, "Isolated"), "I'M  2024 it'S\r\n\n  ok?!"),
            (Words{"I", "'M", " ", " ", "202", "4", " it", "'S", "\r\n\n", " ", " ok", "?!"}));
  EXPECT_EQ(
      pre_tokenize(
          R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})",
          "Hello  world's 123 !!\n\n x"),
      (Words{"Hello", "\xC4\xA0", "\xC4\xA0world", "'s",
             "\xC4\xA0"
             "123",
             "\xC4\xA0!!", "\xC4\x8A\xC4\x8A", "\xC4\xA0x"}));
}

TEST(PreTokenizers, CharacterClassSplitters) {
  EXPECT_EQ(pre_tokenize(R"({"type":"BertPreTokenizer"})",
                         "Hello,world! \xE4\xBD\xA0\xE5\xA5\xBD a\xC2\xA0"
                         "b"),
            (Words{"Hello", ",", "world", "!", "\xE4\xBD\xA0\xE5\xA5\xBD", "a", "b"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Whitespace"})", "Hello, w\xC3\xB6rld!!  x_y 3.14"),
            (Words{"Hello", ",", "w\xC3\xB6rld", "!!", "x_y", "3", ".", "14"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":false})", "a123b45"),
            (Words{"a", "123", "b", "45"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Punctuation","behavior":"MergedWithNext"})", "a,b.c"),
            (Words{"a", ",b", ".c"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"FixedLength","length":3})", "abcdefgh"),
            (Words{"abc", "def", "gh"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"CharDelimiterSplit","delimiter":"x"})", "axbxxc"),
            (Words{"a", "b", "c"}));
}

TEST(PreTokenizers, Metaspace) {
  const std::string bar = "\xE2\x96\x81";  // U+2581
  EXPECT_EQ(
      pre_tokenize(
          R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":true})",
          "hello  world"),
      (Words{bar + "hello", bar, bar + "world"}));
  EXPECT_EQ(
      pre_tokenize(
          R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never","split":false})",
          " hello world"),
      (Words{bar + "hello" + bar + "world"}));
  EXPECT_THROW(pre_tokenize(R"({"type":"Metaspace","replacement":"ab"})", "x"), InputError);
}

TEST(Normalizers, TextEdits) {
  EXPECT_EQ(
      normalize(R"({"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "})", "a  b\t\nc"),
      "a b c");
  EXPECT_EQ(normalize(R"({"type":"Strip","strip_left":true,"strip_right":true})", "  a b  "),
            "a b");
  EXPECT_EQ(normalize(R"({"type":"Nmt"})",
                      "a\x01"
                      "b\xE2\x80\x8B"
                      "c"),
            "ab c");
  EXPECT_EQ(normalize(R"({"type":"Prepend","prepend":"_"})", "ab"), "_ab");
  EXPECT_EQ(normalize(R"({"type":"ByteLevel"})", "\xC3\xA9 a"),
            "\xC3\x83\xC2\xA9\xC4\xA0"
            "a");
  EXPECT_EQ(
      normalize(
          R"({"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"},{"type":"Lowercase"}]})",
          "\xC3\x89T\xC3\x89"),
      "ete");
  // Nested sequences (each nesting level has its own scratch buffers).
  EXPECT_EQ(normalize(R"({"type":"Sequence","normalizers":[
                           {"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"Lowercase"}]},
                           {"type":"Sequence","normalizers":[{"type":"StripAccents"},
                             {"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"Regex":" +"},"content":"_"},
                                                               {"type":"Prepend","prepend":">"}]}]}]})",
                      "\xC3\x89T\xC3\x89  \xC3\x87"
                      "a"),
            ">ete_ca");
  // Lowercase of U+0130 is "i" + U+0307, as Rust's char::to_lowercase.
  EXPECT_EQ(normalize(R"({"type":"Lowercase"})", "\xC4\xB0"), "i\xCC\x87");
  EXPECT_THROW(normalize(R"({"type":"Precompiled","precompiled_charsmap":"!!!"})", "x"),
               InputError);
  EXPECT_THROW(normalize(R"({"type":"Unknown"})", "x"), InputError);
}

}  // namespace
}  // namespace ftune::text
