// read_dataset: one test per validation rule (each bad row named as PATH:LINE: reason), the fail
// and skip policies and the maximum fraction, explicit label mappings, the report, and
// tokenization up front with its measurements.
#include "data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data_test_util.h"

namespace ftune::data {
namespace {

using test::input_error_of;
using test::TempDir;
using test::write_data_file;
using ::testing::HasSubstr;
using ::testing::Not;

DataSpec spec_for(const std::string& path) {
  DataSpec s;
  s.path = path;
  return s;
}

struct Failure {
  std::string path, message;
};
// The message read_dataset raises for `content` in a file called `name` (fail policy unless
// `spec` says otherwise), and the file's path.
Failure fail_message(const std::string& name, const std::string& content, DataSpec spec = {}) {
  TempDir d;
  spec.path = write_data_file(d, name, content);
  RawDataset ds;
  return {spec.path, input_error_of([&] { read_dataset(spec, &ds); })};
}

// The failure's message holds PATH followed by `suffix` (e.g. ":3: empty 'text'").
MATCHER_P(NamesRow, suffix, "") {
  *result_listener << "message: " << arg.message;
  return arg.message.find(arg.path + suffix) != std::string::npos;
}

TEST(Validation, EmptyText) {
  const auto m = fail_message("a.csv", "text,label\nok,1\n\"  \",0\n");
  EXPECT_THAT(m, NamesRow(":3: empty 'text'"));
  EXPECT_THAT(m, NamesRow(": 1 of 2 rows are bad (data.bad_rows is fail)"));
}

TEST(Validation, MissingText) {
  EXPECT_THAT(fail_message("a.jsonl", "{\"text\":\"a\",\"label\":1}\n{\"label\":0}\n"),
              NamesRow(":2: missing 'text'"));
}

TEST(Validation, TextOfTheWrongType) {
  EXPECT_THAT(fail_message("a.jsonl", "{\"text\":[1],\"label\":1}\n"),
              NamesRow(":1: 'text' must be a string, got array"));
}

TEST(Validation, EmptyTextPair) {
  EXPECT_THAT(fail_message("a.tsv", "text\ttext_pair\tlabel\na\tb\t1\nc\t\t0\n"),
              NamesRow(":3: empty 'text_pair'"));
}

TEST(Validation, MissingLabel) {
  EXPECT_THAT(fail_message("a.jsonl", "{\"text\":\"a\"}\n"), NamesRow(":1: missing 'label'"));
  EXPECT_THAT(fail_message("a.csv", "text,label\na,1\nb,\n"), NamesRow(":3: missing 'label'"));
  EXPECT_THAT(fail_message("a.jsonl", "{\"text\":\"a\",\"label\":1.5}\n"),
              NamesRow(":1: 'label' must be an integer or a string, got float"));
}

TEST(Validation, InvalidUtf8IsReportedNotReplaced) {
  EXPECT_THAT(fail_message("a.csv", "text,label\nab\xC3(,1\n"),
              NamesRow(":2: invalid UTF-8 in 'text' at byte 3"));
  EXPECT_THAT(
      fail_message("a.jsonl", "{\"text\":\"a\",\"label\":1}\n{\"text\":\"\xFF\",\"label\":1}\n"),
      NamesRow(":2: invalid UTF-8 at column 10"));
  // A truncated sequence at the end of a TSV label.
  EXPECT_THAT(fail_message("a.tsv", "text\tlabel\nfine\tpos\xE2\x82\n"),
              NamesRow(":2: invalid UTF-8 in 'label' at byte 4"));
}

TEST(Validation, LabelOutsideTheLabelSet) {
  DataSpec spec;
  spec.labels.names = {"neg", "pos"};
  EXPECT_THAT(
      fail_message("a.csv", "text,label\na,pos\nb,neutral\nc,0\n", spec),
      NamesRow(":3: label 'neutral' is not one of the 2 labels ('neg', 'pos', or an id 0..1)"));
}

TEST(Validation, OneIntegerLabelWrittenTwoWays) {
  // Labels are names, so "1" and "01" would be two classes: refused, naming both lines.
  EXPECT_THAT(fail_message("a.csv", "text,label\na,0\nb,1\nc,01\n"),
              NamesRow(":4: label '01' is the integer 1 that line 3 writes '1'"));
}

TEST(Validation, RaggedRow) {
  EXPECT_THAT(fail_message("a.tsv", "text\tlabel\na\t1\nb\twith\ttab\t0\n"),
              NamesRow(":3: ragged row: expected 2 fields, found 4"));
  // Without a header the first row sets the width.
  DataSpec spec;
  spec.has_header = false;
  EXPECT_THAT(fail_message("b.csv", "a,1\nb\n", spec),
              NamesRow(":2: ragged row: expected 2 fields, found 1"));
}

TEST(Validation, UnparsableJsonLine) {
  const auto m = fail_message("a.jsonl", "{\"text\":\"a\",\"label\":1}\n\n{\"text\": \"b\",\n");
  EXPECT_THAT(m, NamesRow(":3: invalid JSON at column"));
  EXPECT_THAT(fail_message("a.jsonl", "[1, 2]\n"),
              NamesRow(":1: expected a JSON object, got array"));
}

TEST(Validation, MalformedCsvQuoting) {
  EXPECT_THAT(fail_message("a.csv", "text,label\n\"a\"b,1\n"),
              NamesRow(":2: unexpected character 'b' after the closing quote of field 1"));
}

std::string many_bad_rows(int good, int bad) {
  std::string s = "text,label\n";
  for (int i = 0; i < good; ++i) s += "t" + std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  for (int i = 0; i < bad; ++i) s += ",1\n";
  return s;
}

TEST(Policy, FailListsTheFirstTenAndTheCount) {
  const auto m = fail_message("a.csv", many_bad_rows(3, 12));
  EXPECT_THAT(m, NamesRow(": 12 of 15 rows are bad (data.bad_rows is fail):"));
  EXPECT_THAT(m, NamesRow(":5: empty 'text'"));   // first bad row (header + 3 good)
  EXPECT_THAT(m, NamesRow(":14: empty 'text'"));  // tenth
  EXPECT_THAT(m, Not(NamesRow(":15:")));
  EXPECT_THAT(m.message, HasSubstr("... and 2 more"));
}

TEST(Policy, SkipUnderTheMaximumCountsTheRows) {
  TempDir d;
  DataSpec spec = spec_for(write_data_file(d, "a.csv", many_bad_rows(18, 2)));
  spec.bad_rows = BadRowPolicy::kSkip;
  spec.max_bad_fraction = 0.1;  // 2 of 20 is exactly at the limit
  RawDataset ds;
  const DatasetReport r = read_dataset(spec, &ds);
  EXPECT_EQ(r.rows, 20);
  EXPECT_EQ(r.examples, 18);
  EXPECT_EQ(r.skipped, 2);
  ASSERT_EQ(r.skipped_rows.size(), 2u);
  EXPECT_EQ(r.skipped_rows[0].line, 20);
  EXPECT_EQ(r.skipped_rows[1].line, 21);
  EXPECT_EQ(r.skipped_rows[0].reason, "empty 'text'");
  EXPECT_EQ(ds.examples.size(), 18u);
  EXPECT_EQ(r.class_counts, (std::vector<int64_t>{9, 9}));
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["skipped"], 2);
  EXPECT_EQ(j["skipped_rows"][1]["line"], 21);
  EXPECT_EQ(j["format"], "csv");
  EXPECT_FALSE(j.contains("tokens_per_second"));
}

TEST(Policy, SkipOverTheMaximumIsAnErrorWithTheListing) {
  TempDir d;
  DataSpec spec = spec_for(write_data_file(d, "a.csv", many_bad_rows(17, 3)));
  spec.bad_rows = BadRowPolicy::kSkip;
  spec.max_bad_fraction = 0.1;
  RawDataset ds;
  const auto m = input_error_of([&] { read_dataset(spec, &ds); });
  EXPECT_THAT(m, HasSubstr(spec.path + ": 3 of 20 rows are bad (15.00%), over "
                                       "data.max_bad_fraction 0.1 (10.00%):"));
  EXPECT_THAT(m, HasSubstr(spec.path + ":19: empty 'text'"));
  EXPECT_THAT(m, HasSubstr(spec.path + ":21: empty 'text'"));
}

TEST(Policy, SkippedLabelsOutsideTheSetKeepFileOrder) {
  TempDir d;
  DataSpec spec = spec_for(write_data_file(d, "a.csv", "text,label\na,x\n,pos\nb,neg\nc,pos\n"));
  spec.bad_rows = BadRowPolicy::kSkip;
  spec.max_bad_fraction = 0.5;
  spec.labels.names = {"neg", "pos"};
  RawDataset ds;
  const DatasetReport r = read_dataset(spec, &ds);
  ASSERT_EQ(r.skipped_rows.size(), 2u);
  EXPECT_EQ(r.skipped_rows[0].line, 2);  // label outside the set
  EXPECT_EQ(r.skipped_rows[1].line, 3);  // empty text
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ds.examples[1].line, 5);
}

TEST(Policy, MaxFractionOutsideZeroToOneIsAnError) {
  DataSpec spec;
  spec.max_bad_fraction = 1.5;
  EXPECT_EQ(fail_message("a.csv", "text,label\na,1\n", spec).message,
            "data.max_bad_fraction: expected 0..1, got 1.5");
}

TEST(Policy, ParseNames) {
  EXPECT_EQ(parse_bad_row_policy("skip", "data.bad_rows"), BadRowPolicy::kSkip);
  EXPECT_EQ(input_error_of([] { parse_bad_row_policy("ignore", "data.bad_rows"); }),
            "data.bad_rows: expected fail or skip, got 'ignore'");
}

TEST(Labels, FromDataIntegerAndString) {
  TempDir d;
  RawDataset ds;
  read_dataset(spec_for(write_data_file(
                   d, "a.jsonl", "{\"text\":\"a\",\"label\":2}\n{\"text\":\"b\",\"label\":0}\n")),
               &ds);
  // Integers are names: {0, 2} is two classes, no phantom "1".
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"0", "2"}));
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{1, 0}));
  read_dataset(spec_for(write_data_file(d, "b.tsv", "text\tlabel\na\tpos\nb\tneg\n")), &ds);
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{1, 0}));
}

TEST(Labels, ExplicitMapAndIntegerLabelsAddressNames) {
  TempDir d;
  DataSpec spec = spec_for(write_data_file(d, "a.csv", "text,label\na,entail\nb,1\nc,contra\n"));
  spec.labels.ids = {{"contra", 1}, {"entail", 0}};
  RawDataset ds;
  const DatasetReport r = read_dataset(spec, &ds);
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"entail", "contra"}));
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(r.class_counts, (std::vector<int64_t>{1, 2}));
}

// The reports: every label set is a bijection between names and ids, whatever the names
// look like.
TEST(Labels, IntegerLabelsOutsideZeroToKAreNames) {
  TempDir d;
  RawDataset ds;
  // {1, 2}: two classes "1" (id 0) and "2" (id 1), never a phantom class 0.
  const DatasetReport r = read_dataset(
      spec_for(write_data_file(d, "a.jsonl",
                               "{\"text\":\"a\",\"label\":2}\n{\"text\":\"b\",\"label\":1}\n"
                               "{\"text\":\"c\",\"label\":2}\n")),
      &ds);
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(r.class_counts, (std::vector<int64_t>{1, 2}));
  // {-1, 0, 1} in numeric order; a stray 5000 is a class of its own, not a 5001-class head.
  read_dataset(spec_for(write_data_file(d, "b.csv", "text,label\na,1\nb,-1\nc,0\nd,10\n")), &ds);
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"-1", "0", "1", "10"}));
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{2, 0, 1, 3}));
  read_dataset(spec_for(write_data_file(d, "c.csv", "text,label\na,0\nb,5000\nc,1\n")), &ds);
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"0", "1", "5000"}));
  // Mixed integers and words: byte order, every label a name.
  read_dataset(spec_for(write_data_file(d, "e.csv", "text,label\na,neg\nb,1\nc,10\nd,9\n")), &ds);
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"1", "10", "9", "neg"}));
}

TEST(Labels, NumericNamesGivenInIdOrder) {
  TempDir d;
  RawDataset ds;
  // model.labels: [1, 2] and data labels 1 / 2 (the issue: every row became class "2").
  DataSpec spec = spec_for(write_data_file(d, "a.csv", "text,label\na,1\nb,2\nc,1\n"));
  spec.labels.names = {"1", "2"};
  DatasetReport r = read_dataset(spec, &ds);
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(r.class_counts, (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(ds.labels.integer_aliases);
  // Names need not be in numeric order: "1" is id 0 and "0" is id 1.
  spec = spec_for(write_data_file(d, "b.tsv", "text\tlabel\na\t0\nb\t1\n"));
  spec.labels.names = {"1", "0"};
  read_dataset(spec, &ds);
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{1, 0}));
  // {-1, 0, 1} given as names (the issue: "label '0' is listed twice").
  spec = spec_for(write_data_file(d, "c.csv", "text,label\na,-1\nb,1\nc,0\n"));
  spec.labels.names = {"-1", "0", "1"};
  read_dataset(spec, &ds);
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{0, 2, 1}));
  // With integer names an integer is only ever a name: "0" is not id 0 of {"1", "2"}.
  spec = spec_for(write_data_file(d, "e.csv", "text,label\na,1\nb,0\n"));
  spec.labels.names = {"1", "2"};
  EXPECT_THAT(input_error_of([&] { read_dataset(spec, &ds); }),
              HasSubstr(":3: label '0' is not one of the 2 labels ('1', '2')"));
}

TEST(Labels, IntegersAddressIdsOnlyWhenNoNameIsAnInteger) {
  TempDir d;
  RawDataset ds;
  DataSpec spec = spec_for(write_data_file(d, "a.csv", "text,label\na,1\nb,neg\nc,0\n"));
  spec.labels.names = {"neg", "pos"};
  read_dataset(spec, &ds);
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{1, 0, 0}));
  // Only the canonical spelling, only 0..K-1.
  for (const char* label : {"01", "2", "-1", "+1"}) {
    spec = spec_for(write_data_file(d, "b.csv", std::string("text,label\na,") + label + "\n"));
    spec.labels.names = {"neg", "pos"};
    EXPECT_THAT(input_error_of([&] { read_dataset(spec, &ds); }), HasSubstr("is not one of"))
        << label;
  }
  // One integer name turns the aliases off: "0" is then no name of the set.
  spec = spec_for(write_data_file(d, "c.csv", "text,label\na,0\n"));
  spec.labels.names = {"neg", "1"};
  EXPECT_THAT(input_error_of([&] { read_dataset(spec, &ds); }),
              HasSubstr(":2: label '0' is not one of the 2 labels ('neg', '1')"));
  // A validation file read with the training data's own set: its ids are ftune's order, so an
  // integer does not address them.
  spec = spec_for(write_data_file(d, "e.csv", "text,label\na,1\n"));
  spec.labels.names = {"neg", "pos"};
  spec.labels.integer_aliases = false;
  EXPECT_THAT(input_error_of([&] { read_dataset(spec, &ds); }),
              HasSubstr(":2: label '1' is not one of the 2 labels ('neg', 'pos')"));
}

TEST(Labels, IntegerLabelSpelling) {
  EXPECT_EQ(integer_label("0"), 0);
  EXPECT_EQ(integer_label("-12"), -12);
  EXPECT_EQ(integer_label("007"), 7);
  EXPECT_EQ(integer_label("999999999999999999"), 999999999999999999LL);
  for (const char* s : {"", "-", "+1", "1.0", " 1", "1e3", "1234567890123456789", "x"})
    EXPECT_EQ(integer_label(s), std::nullopt) << s;
}

TEST(Labels, BadMappingsAreErrors) {
  TempDir d;
  DataSpec spec = spec_for(write_data_file(d, "a.csv", "text,label\na,x\n"));
  RawDataset ds;
  spec.labels.ids = {{"x", 0}, {"y", 2}};
  EXPECT_EQ(input_error_of([&] { read_dataset(spec, &ds); }),
            "model.labels: label 'y' has id 2; ids must be 0..1");
  spec.labels.ids = {{"x", 0}, {"y", 0}};
  EXPECT_THAT(input_error_of([&] { read_dataset(spec, &ds); }), HasSubstr("both have id 0"));
  spec.labels.names = {"x"};
  EXPECT_THAT(input_error_of([&] { read_dataset(spec, &ds); }), HasSubstr("not both"));
}

// The trainer moves from read_examples to read_dataset: on a valid JSONL file both give the same
// rows and label set, so runs stay bit for bit the same.
TEST(Dataset, SameRowsAndLabelsAsReadExamplesOnJsonl) {
  TempDir d;
  const auto path = write_data_file(d, "a.jsonl",
                                    "{\"text\": \"a\", \"text_pair\": \"b\", \"label\": 2}\n"
                                    "\n"
                                    "{\"text\": \"c\", \"label\": 0, \"extra\": true}\n"
                                    "{\"text\": \"d\", \"text_pair\": null, \"label\": 1}\n");
  RawDataset ds;
  read_dataset(spec_for(path), &ds);
  const auto old = read_examples(path, ExampleFields{});
  ASSERT_EQ(ds.examples.size(), old.size());
  for (size_t i = 0; i < old.size(); ++i) {
    EXPECT_EQ(ds.examples[i].text, old[i].text);
    EXPECT_EQ(ds.examples[i].text_pair, old[i].text_pair);
    EXPECT_EQ(ds.examples[i].label, old[i].label);
    EXPECT_EQ(ds.examples[i].line, old[i].line);
  }
  const LabelSet labels = LabelSet::from_examples(old);
  EXPECT_EQ(ds.labels.names, labels.names);
  for (size_t i = 0; i < old.size(); ++i) EXPECT_EQ(ds.label_ids[i], labels.id(old[i], path));
}

TEST(Dataset, NoExamplesIsAnError) {
  const Failure f = fail_message("a.csv", "text,label\n");
  EXPECT_EQ(f.message, f.path + ": no examples");
}

TEST(Dataset, TokenizedUpFrontWithMeasurements) {
  TempDir d;
  std::string content = "text,text_pair,label\n";
  for (int i = 0; i < 40; ++i)
    content += "the quick brown fox number " + std::to_string(i) + ",jumps over the lazy dog," +
               std::to_string(i % 2) + "\n";
  content += "\"" + std::string(400, 'a') + " " + [] {
    std::string s;
    for (int i = 0; i < 200; ++i) s += "word ";
    return s;
  }() + "\",short,1\n";
  DataSpec spec = spec_for(write_data_file(d, "a.csv", content));
  RawDataset ds;
  DatasetReport r = read_dataset(spec, &ds);
  const text::Tokenizer tok =
      text::Tokenizer::from_dir(test::fixtures_dir() + "/tokenizers/minilm");
  const auto examples = tokenize_dataset(tok, ds, 32, &r);
  ASSERT_EQ(examples.size(), 41u);
  EXPECT_EQ(examples[0].label, 0);
  EXPECT_EQ(examples[1].label, 1);
  EXPECT_EQ(examples[40].input_ids.size(), 32u);  // over-long: truncated, not rejected
  EXPECT_EQ(r.tokenize.truncated, 1);
  EXPECT_EQ(r.tokenize.longest, 32);
  int64_t tokens = 0;
  for (const auto& e : examples) tokens += static_cast<int64_t>(e.input_ids.size());
  EXPECT_EQ(r.tokenize.tokens, tokens);
  EXPECT_GT(r.tokenize.seconds, 0.0);
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["tokens"], tokens);
  EXPECT_EQ(j["truncated"], 1);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
}

}  // namespace
}  // namespace ftune::data
