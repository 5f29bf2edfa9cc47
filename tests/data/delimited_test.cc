// RFC 4180 record splitting: quoting, doubled quotes, embedded separators and newlines, CRLF,
// BOM, blank lines, record start lines, malformed quoting.
#include "data/delimited.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ftune::data
