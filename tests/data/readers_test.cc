// Readers for each format: header / no header, columns by name and index, quoting, CRLF, BOM,
// format by extension, missing columns named with the file.
#include "data/readers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data_test_util.h"

namespace ftune::data {
namespace {

using test::input_error_of;
using test::TempDir;
using test::write_data_file;
using ::testing::HasSubstr;

TEST(Readers, TsvWithHeaderByName) {
  TempDir d;
  const auto path = write_data_file(d, "a.tsv",
                                    "label\ttext_pair\ttext\n"
                                    "pos\tsecond\tfirst\n"
                                    "neg\tb\ta\n");
  const ReadRows r = read_rows(path, DataFormat::kAuto, true, ColumnMap{});
  ASSERT_EQ(r.examples.size(), 2u);
  EXPECT_TRUE(r.bad.empty());
  EXPECT_EQ(r.rows, 2);
  EXPECT_EQ(r.examples[0].text, "first");
  EXPECT_EQ(r.examples[0].text_pair, "second");
  EXPECT_EQ(r.examples[0].label, "pos");
  EXPECT_EQ(r.examples[0].line, 2);
  EXPECT_EQ(r.examples[1].line, 3);
}

TEST(Readers, CsvQuotingCrlfBomAndStartLines) {
  TempDir d;
  const auto path = write_data_file(d, "a.csv",
                                    "\xEF\xBB\xBFtext,label\r\n"
                                    "\"a, \"\"quoted\"\"\r\nsentence\",1\r\n"
                                    "plain,0\r\n");
  const ReadRows r = read_rows(path, DataFormat::kAuto, true, ColumnMap{});
  ASSERT_EQ(r.examples.size(), 2u) << (r.bad.empty() ? "" : r.bad[0].reason);
  EXPECT_EQ(r.examples[0].text, "a, \"quoted\"\r\nsentence");
  EXPECT_FALSE(r.examples[0].text_pair.has_value());  // no text_pair column: single texts
  EXPECT_EQ(r.examples[0].line, 2);
  EXPECT_EQ(r.examples[1].text, "plain");
  EXPECT_EQ(r.examples[1].line, 4);
}

TEST(Readers, NoHeaderColumnsByIndex) {
  TempDir d;
  const auto path = write_data_file(d, "rows.txt", "0\tpremise\thypothesis\n2\tp2\th2\n");
  ColumnMap c;
  c.label_index = 0;
  c.text_index = 1;
  c.text_pair_index = 2;
  const ReadRows r = read_rows(path, DataFormat::kTsv, false, c);
  ASSERT_EQ(r.examples.size(), 2u);
  EXPECT_EQ(r.examples[0].text, "premise");
  EXPECT_EQ(r.examples[0].text_pair, "hypothesis");
  EXPECT_EQ(r.examples[0].label, "0");
  EXPECT_EQ(r.examples[1].label, "2");
  EXPECT_EQ(r.examples[0].line, 1);
}

TEST(Readers, IndexOutsideTheColumnsIsAnError) {
  TempDir d;
  const auto path = write_data_file(d, "rows.csv", "a,1\n");
  ColumnMap c;
  c.label_index = 2;
  EXPECT_EQ(input_error_of([&] { read_rows(path, DataFormat::kAuto, false, c); }),
            path + ":1: label column index 2 is outside the 2 columns of the first row");
}

TEST(Readers, MissingColumnNamesColumnAndFile) {
  TempDir d;
  const auto path = write_data_file(d, "a.csv", "sentence,label\nx,1\n");
  EXPECT_EQ(input_error_of([&] { read_rows(path, DataFormat::kAuto, true, ColumnMap{}); }),
            path + ":1: no column 'text' in the header (columns: sentence, label)");
  ColumnMap c;
  c.text = "sentence";
  c.label = "gold";
  EXPECT_THAT(input_error_of([&] { read_rows(path, DataFormat::kAuto, true, c); }),
              HasSubstr("no column 'gold'"));
}

// text,label,label used to train silently on the first 'label' column: a name given twice is
// refused, naming it, the file and both columns (CSV and TSV alike).
TEST(Readers, DuplicateHeaderColumnIsRefused) {
  TempDir d;
  const auto csv = write_data_file(d, "dup.csv", "text,label,label\nx,1,0\n");
  EXPECT_EQ(input_error_of([&] { read_rows(csv, DataFormat::kAuto, true, ColumnMap{}); }),
            csv + ":1: header row: column 'label' appears twice (columns 2 and 3); rename one");
  const auto tsv = write_data_file(d, "dup.tsv", "text\tnote\tlabel\tnote\nx\ta\t1\tb\n");
  EXPECT_THAT(input_error_of([&] { read_rows(tsv, DataFormat::kAuto, true, ColumnMap{}); }),
              HasSubstr(tsv + ":1: header row: column 'note' appears twice"));
}

TEST(Readers, JsonlWithBomCrlfIntegerLabelsAndCustomKeys) {
  TempDir d;
  const auto path = write_data_file(d, "a.jsonl",
                                    "\xEF\xBB\xBF{\"q\": \"a\", \"l\": 1}\r\n"
                                    "\r\n"
                                    "{\"q\": \"b\", \"p\": \"c\", \"l\": \"x\"}\n");
  ColumnMap c;
  c.text = "q";
  c.text_pair = "p";
  c.label = "l";
  const ReadRows r = read_rows(path, DataFormat::kAuto, true, c);
  ASSERT_EQ(r.examples.size(), 2u);
  EXPECT_EQ(r.examples[0].label, "1");
  EXPECT_FALSE(r.examples[0].text_pair.has_value());
  EXPECT_EQ(r.examples[1].text_pair, "c");
  EXPECT_EQ(r.examples[1].line, 3);
  EXPECT_EQ(r.rows, 2);
}

TEST(Readers, FormatByExtensionOrExplicit) {
  EXPECT_EQ(data_format_for_path("x/train.JSONL"), DataFormat::kJsonl);
  EXPECT_EQ(data_format_for_path("t.tsv"), DataFormat::kTsv);
  EXPECT_EQ(data_format_for_path("t.csv"), DataFormat::kCsv);
  EXPECT_THAT(input_error_of([] { data_format_for_path("data.txt"); }),
              HasSubstr("data.txt: cannot tell the format from the extension '.txt'"));
  EXPECT_EQ(parse_data_format("csv", "data.format"), DataFormat::kCsv);
  EXPECT_EQ(input_error_of([] { parse_data_format("xlsx", "data.format"); }),
            "data.format: expected one of auto, jsonl, tsv, csv, flagembedding; got 'xlsx'");
  TempDir d;
  // A .txt file read as CSV because the format says so.
  const auto path = write_data_file(d, "a.txt", "text,label\nhi,1\n");
  EXPECT_EQ(read_rows(path, DataFormat::kCsv, true, ColumnMap{}).examples.size(), 1u);
}

TEST(Readers, MissingFileIsAnError) {
  EXPECT_THAT(
      input_error_of([] { read_rows("/nonexistent/x.csv", DataFormat::kAuto, true, ColumnMap{}); }),
      HasSubstr("/nonexistent/x.csv"));
}

}  // namespace
}  // namespace ftune::data
