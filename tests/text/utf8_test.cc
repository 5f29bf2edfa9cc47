// The UTF-8 policy: invalid input is repaired, each maximal invalid subsequence becoming one
// U+FFFD, exactly as Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy do.
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "text/tokenizer_fixtures.h"
#include "text/utf8.h"

namespace ftune::text {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidInputIsUnchanged) {
  for (const std::string& s : std::vector<std::string>{
           "", "ascii", "caf\xC3\xA9", "\xE4\xBD\xA0\xE5\xA5\xBD", "\xF0\x9F\x98\x80",
           "\xF4\x8F\xBF\xBF", std::string("nul\0byte", 8)}) {
    EXPECT_EQ(utf8_find_invalid(s), std::string::npos) << s;
    EXPECT_EQ(utf8_sanitize(s), s);
  }
}

TEST(Utf8, MaximalSubpartsBecomeOneReplacementEach) {
  // Unicode 15 §3.9, Table 3-8: "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(utf8_find_invalid(in), 1u);
  EXPECT_EQ(utf8_sanitize(in),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), kFffd + kFffd);              // overlong: lead byte invalid
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate U+D800
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xE2\x82"), kFffd);  // truncated at the end
  EXPECT_EQ(utf8_sanitize("\xFF"), kFffd);
}

TEST(Utf8, DecodeEncodeRoundTrip) {
  for (char32_t c : {U'\0', U'a', U'\x7F', U'\x80', U'\u07FF', U'\u0800', U'\uFFFF', U'\U00010000',
                     U'\U0010FFFF'}) {
    const std::string s = utf8_encode(c);
    size_t i = 0;
    EXPECT_EQ(utf8_next(s, i), c);
    EXPECT_EQ(i, s.size());
    size_t j = s.size();
    EXPECT_EQ(utf8_prev(s, j), c);
    EXPECT_EQ(j, 0u);
    EXPECT_EQ(utf8_encoded_len(c), static_cast<int>(s.size()));
  }
  EXPECT_EQ(utf8_count("a\xC3\xA9\xF0\x9F\x98\x80"), 3u);
}

TEST(Utf8, EncodeRepairsInvalidInputLikePython) {
  // Python: tokenizer(b"ok\xff".decode("utf-8", "replace")) gives the ids of "ok\ufffd".
  const Tokenizer tok = Tokenizer::from_path(test::tokenizer_fixtures_dir() + "/roberta_bpe");
  EXPECT_EQ(tok.encode("ok\xFF tail").ids, tok.encode("ok" + kFffd + " tail").ids);
  EXPECT_EQ(tok.encode("\xE2\x82").ids, tok.encode(kFffd).ids);
}

}  // namespace
}  // namespace ftune::text
