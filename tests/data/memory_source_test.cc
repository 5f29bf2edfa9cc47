// Rows registered in memory (data/memory_source.h) read as the same text in a file: every format,
// bad rows named by the memory path and row number; a name is held once and released with its
// source; a memory path nobody registered is an error naming it, never a file of that name.
#include "data/memory_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "data/readers.h"
#include "data_test_util.h"

namespace ftune::data {
namespace {

using test::input_error_of;
using test::TempDir;
using test::write_data_file;
using ::testing::HasSubstr;

void expect_same_rows(const ReadRows& a, const ReadRows& b) {
  ASSERT_EQ(a.examples.size(), b.examples.size());
  EXPECT_EQ(a.rows, b.rows);
  for (size_t i = 0; i < a.examples.size(); ++i) {
    EXPECT_EQ(a.examples[i].text, b.examples[i].text);
    EXPECT_EQ(a.examples[i].text_pair, b.examples[i].text_pair);
    EXPECT_EQ(a.examples[i].label, b.examples[i].label);
    EXPECT_EQ(a.examples[i].line, b.examples[i].line);
  }
  ASSERT_EQ(a.bad.size(), b.bad.size());
  for (size_t i = 0; i < a.bad.size(); ++i) {
    EXPECT_EQ(a.bad[i].line, b.bad[i].line);
    EXPECT_EQ(a.bad[i].reason, b.bad[i].reason);
  }
}

TEST(MemorySource, EachFormatReadsAsTheSameFile) {
  const std::pair<const char*, const char*> cases[] = {
      {"a.jsonl",
       "{\"text\": \"q\", \"text_pair\": \"p\", \"label\": 1}\n"
       "{\"text\": \"\", \"text_pair\": \"p\", \"label\": 0}\n"
       "{\"text\": \"r\", \"label\": 0}\n"},
      {"a.tsv", "text\ttext_pair\tlabel\nq\tp\t1\nr\ts\t0\n"},
      {"a.csv", "text,text_pair,label\n\"q, quoted\",p,1\nr,s\n"},
      {"a.jsonl", "{\"query\": \"q\", \"pos\": [\"p\"], \"neg\": [\"n1\", \"n2\"]}\n"},
  };
  for (const auto& [name, text] : cases) {
    TempDir d;
    const std::string file = write_data_file(d, name, text);
    const MemorySource source(std::string("t-") + name, text);
    EXPECT_EQ(source.path(), std::string("memory:t-") + name);
    expect_same_rows(read_rows(source.path(), DataFormat::kAuto, true, ColumnMap{}),
                     read_rows(file, DataFormat::kAuto, true, ColumnMap{}));
  }
}

TEST(MemorySource, ANameIsHeldOnceAndReleased) {
  {
    MemorySource held("train.jsonl", "{\"text\": \"a\", \"label\": 1}\n");
    EXPECT_TRUE(data_source_exists("memory:train.jsonl"));
    EXPECT_EQ(read_data_source("memory:train.jsonl"), "{\"text\": \"a\", \"label\": 1}\n");
    EXPECT_THAT(input_error_of([] { MemorySource again("train.jsonl", "x"); }),
                HasSubstr("memory:train.jsonl: another run of this process holds"));
    held.release();
    EXPECT_FALSE(data_source_exists("memory:train.jsonl"));
    MemorySource next("train.jsonl", "y");  // free again
    EXPECT_EQ(read_data_source(next.path()), "y");
  }
  EXPECT_FALSE(data_source_exists("memory:train.jsonl"));  // the destructor released it
  EXPECT_THAT(input_error_of([] { MemorySource unnamed("", "x"); }), HasSubstr("needs a name"));
}

TEST(MemorySource, AnUnregisteredMemoryPathIsNamedNeverAFile) {
  TempDir d;
  write_data_file(d, "memory:x.jsonl", "{\"text\": \"a\", \"label\": 1}\n");  // a file so named
  const std::filesystem::path was = std::filesystem::current_path();
  std::filesystem::current_path(d.path());  // where "memory:x.jsonl" is that file
  EXPECT_FALSE(data_source_exists("memory:x.jsonl"));
  EXPECT_THAT(
      input_error_of([] { read_rows("memory:x.jsonl", DataFormat::kAuto, true, ColumnMap{}); }),
      HasSubstr("memory:x.jsonl: no in-memory rows are registered under this name"));
  std::filesystem::current_path(was);
}

}  // namespace
}  // namespace ftune::data
