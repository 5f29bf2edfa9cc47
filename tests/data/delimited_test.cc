// RFC 4180 record splitting: quoting, doubled quotes, embedded separators and newlines, CRLF,
// BOM, blank lines, record start lines, malformed quoting.
#include "data/delimited.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace ftune::data {
namespace {

using Fields = std::vector<std::string>;

TEST(Delimited, PlainCsvWithCrlfAndBom) {
  const auto r = parse_delimited("\xEF\xBB\xBFtext,label\r\nhello,1\r\nworld,0", ',');
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].fields, (Fields{"text", "label"}));
  EXPECT_EQ(r[1].fields, (Fields{"hello", "1"}));
  EXPECT_EQ(r[2].fields, (Fields{"world", "0"}));
  EXPECT_EQ(r[2].line, 3);
  for (const auto& rec : r) EXPECT_EQ(rec.error, "");
}

TEST(Delimited, QuotedFieldsHoldSeparatorsQuotesAndNewlines) {
  const std::string text =
      "a,b\n"
      "\"x, y\",\"say \"\"hi\"\"\"\n"
      "\"two\nlines\r\nhere\",z\n"
      "after,\"\"\n";
  const auto r = parse_delimited(text, ',');
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[1].fields, (Fields{"x, y", "say \"hi\""}));
  EXPECT_EQ(r[1].line, 2);
  EXPECT_EQ(r[2].fields, (Fields{"two\nlines\r\nhere", "z"}));
  EXPECT_EQ(r[2].line, 3);  // where the record starts
  EXPECT_EQ(r[3].fields, (Fields{"after", ""}));
  EXPECT_EQ(r[3].line, 6);  // the quoted field spanned lines 3-5
}

TEST(Delimited, QuoteInsideUnquotedFieldIsLiteral) {
  const auto r = parse_delimited("he said \"no\"\tlabel\n", '\t');
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].fields, (Fields{"he said \"no\"", "label"}));
}

TEST(Delimited, TabsSeparateTsvCommasDoNot) {
  const auto r = parse_delimited("a,b\tc\n\n\nd\t\n", '\t');
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].fields, (Fields{"a,b", "c"}));
  EXPECT_EQ(r[1].fields, (Fields{"d", ""}));
  EXPECT_EQ(r[1].line, 4);  // blank lines 2-3 skipped but counted
}

TEST(Delimited, CharacterAfterClosingQuoteIsAnErrorAndParsingResumes) {
  const auto r = parse_delimited("\"ab\"c,1\nok,2\n", ',');
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].line, 1);
  EXPECT_NE(r[0].error.find("after the closing quote of field 1"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].error, "");
  EXPECT_EQ(r[1].fields, (Fields{"ok", "2"}));
  EXPECT_EQ(r[1].line, 2);
}

TEST(Delimited, UnterminatedQuoteNamesTheLineItOpened) {
  const auto r = parse_delimited("a,b\nx,\"never\nclosed\n", ',');
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].line, 2);
  EXPECT_EQ(r[1].error, "quoted field 2 opened on line 2 is never closed");
}

// Random fields full of separators, quotes, CR, LF and multi-byte text, written the way a CSV
// writer quotes them, parse back to the same fields, each record at the line where it starts.
TEST(Delimited, RoundTripOfRandomQuotedRecords) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> pieces = {"a",    "b",  ",", "\t",       "\"",  "\n",
                                           "\r\n", "\r", " ", "\xC3\xA9", "\"\""};
  for (char sep : {',', '\t'}) {
    std::vector<Fields> want;
    std::vector<int64_t> want_lines;
    std::string text;
    int64_t line = 1;
    for (int r = 0; r < 200; ++r) {
      const int width = 1 + static_cast<int>(rng() % 4);
      Fields fields;
      std::string row;
      for (int f = 0; f < width; ++f) {
        std::string field;
        for (int k = static_cast<int>(rng() % 6); k > 0; --k)
          field += pieces[rng() % pieces.size()];
        if (width == 1 && field.empty()) field = "x";  // an empty one-field row is a blank line
        std::string quoted = "\"";
        for (char c : field) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
        quoted += "\"";
        const bool plain = field.find_first_of(std::string("\"\r\n") + sep) == std::string::npos;
        row += (f ? std::string(1, sep) : "") + (plain && rng() % 2 ? field : quoted);
        fields.push_back(field);
      }
      want.push_back(fields);
      want_lines.push_back(line);
      row += rng() % 2 ? "\n" : "\r\n";
      for (char c : row) line += c == '\n';
      text += row;
    }
    const auto got = parse_delimited(text, sep);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].error, "") << "record " << i;
      EXPECT_EQ(got[i].fields, want[i]) << "record " << i;
      EXPECT_EQ(got[i].line, want_lines[i]) << "record " << i;
    }
  }
}

}  // namespace
}  // namespace ftune::data
