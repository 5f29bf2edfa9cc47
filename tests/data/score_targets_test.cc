// Float targets of score tasks through read_dataset (data/dataset.h ScoreTargets): JSON numbers
// and decimal text read as written, every bad target a bad row named PATH:LINE (not a number, not
// finite, outside [0, 1] for BCE) under the fail and skip policies, a label list on a score task,
// and the targets carried to the tokenized examples and the step batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data/batcher.h"
#include "data/dataset.h"
#include "data/token_batch.h"
#include "data_test_util.h"
#include "text/tokenizer.h"

namespace ftune::data {
namespace {

using test::input_error_of;
using test::TempDir;
using test::write_data_file;
using ::testing::HasSubstr;

DataSpec score_spec(const std::string& path, ScoreTargets kind) {
  DataSpec s;
  s.path = path;
  s.targets = kind;
  s.columns.numeric_label = true;
  s.labels.names = {"LABEL_0"};
  s.targets_key = "training.loss bce";
  return s;
}

TEST(ScoreTargets, JsonNumbersAndDecimalTextAreRead) {
  TempDir d;
  const std::string jsonl = write_data_file(d, "a.jsonl",
                                            "{\"text\":\"a\",\"text_pair\":\"b\",\"label\":0.25}\n"
                                            "{\"text\":\"a\",\"label\":1}\n"
                                            "{\"text\":\"a\",\"label\":\"0.5\"}\n"
                                            "{\"text\":\"a\",\"label\":1e-3}\n");
  RawDataset ds;
  const DatasetReport r = read_dataset(score_spec(jsonl, ScoreTargets::kUnitScores), &ds);
  EXPECT_EQ(ds.targets, (std::vector<float>{0.25f, 1.0f, 0.5f, 1e-3f}));
  EXPECT_EQ(ds.label_ids, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(ds.labels.names, std::vector<std::string>{"LABEL_0"});
  EXPECT_EQ(r.class_counts, std::vector<int64_t>{4});
  const std::string csv = write_data_file(d, "a.csv", "text,label\nx,4.75\ny,-2\nz,3e2\n");
  RawDataset c;
  read_dataset(score_spec(csv, ScoreTargets::kScores), &c);
  EXPECT_EQ(c.targets, (std::vector<float>{4.75f, -2.0f, 300.0f}));
}

TEST(ScoreTargets, BadTargetsAreBadRowsNamingTheLine) {
  TempDir d;
  const std::string path = write_data_file(d, "a.jsonl",
                                           "{\"text\":\"a\",\"label\":0.5}\n"
                                           "{\"text\":\"a\",\"label\":1.5}\n"
                                           "{\"text\":\"a\",\"label\":\"abc\"}\n"
                                           "{\"text\":\"a\",\"label\":\"nan\"}\n"
                                           "{\"text\":\"a\",\"label\":[0, 1]}\n"
                                           "{\"text\":\"a\",\"label\":1e400}\n");
  RawDataset ds;
  const std::string m =
      input_error_of([&] { read_dataset(score_spec(path, ScoreTargets::kUnitScores), &ds); });
  EXPECT_THAT(m, HasSubstr(path + ":2: target 1.5 is outside [0, 1] (binary cross-entropy, "
                                  "training.loss bce"));
  EXPECT_THAT(m, HasSubstr(path + ":3: score 'abc' is not a number"));
  EXPECT_THAT(m, HasSubstr(path + ":4: score 'nan' is not a number"));
  EXPECT_THAT(m, HasSubstr(path + ":5: 'label' is a list of labels, but the task has one label"));
  EXPECT_THAT(m, HasSubstr(path + ":6: invalid JSON: a number too large for a double"));
  EXPECT_THAT(m, HasSubstr("5 of 6 rows are bad"));
  // MSE takes any finite number: 1.5 is fine there.
  const std::string mse =
      input_error_of([&] { read_dataset(score_spec(path, ScoreTargets::kScores), &ds); });
  EXPECT_THAT(mse, HasSubstr("4 of 6 rows are bad"));
  EXPECT_THAT(mse, ::testing::Not(HasSubstr(":2:")));
  // Skipped under data.bad_rows skip (within max_bad_fraction), counted in the report.
  DataSpec skip = score_spec(path, ScoreTargets::kScores);
  skip.bad_rows = BadRowPolicy::kSkip;
  skip.max_bad_fraction = 0.9;
  const DatasetReport r = read_dataset(skip, &ds);
  EXPECT_EQ(ds.targets, (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(r.skipped, 4);
}

TEST(ScoreTargets, ClassLabelsStillRefuseFloats) {
  // Without a score task a JSON float is not a label (it used to be, and stays, a bad row).
  TempDir d;
  DataSpec s;
  s.path = write_data_file(d, "a.jsonl", "{\"text\":\"a\",\"label\":0.5}\n");
  RawDataset ds;
  EXPECT_THAT(input_error_of([&] { read_dataset(s, &ds); }),
              HasSubstr(":1: 'label' must be an integer or a string, got float"));
}

TEST(ScoreTargets, CarriedToExamplesAndBatches) {
  TempDir d;
  const std::string path = write_data_file(d, "a.jsonl",
                                           "{\"text\":\"good day\",\"label\":0.75}\n"
                                           "{\"text\":\"a bad day it was\",\"label\":0.0}\n");
  RawDataset ds;
  read_dataset(score_spec(path, ScoreTargets::kUnitScores), &ds);
  const text::Tokenizer tok =
      text::Tokenizer::from_file(test::fixtures_dir() + "/tokenizers/minilm/tokenizer.json");
  const auto rows = tokenize_dataset(tok, ds, 16, nullptr);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].targets, std::vector<float>{0.75f});
  EXPECT_EQ(rows[1].targets, std::vector<float>{0.0f});
  EXPECT_EQ(rows[1].label, 0);
  const Batch b = make_batch(rows, {1, 0}, 0);
  EXPECT_EQ(b.targets, (std::vector<float>{0.0f, 0.75f}));
  EXPECT_EQ(b.target_width(), 1);
  EXPECT_EQ(slice_rows(b, 1, 1).targets, std::vector<float>{0.75f});
  std::vector<int32_t> positions(b.size * b.seq_len, 0);
  EXPECT_EQ(layout_rows(b, positions, 1, 1, BatchLayout::Packed).targets,
            std::vector<float>{0.75f});
}

DataSpec multi_label_spec(const std::string& path, std::vector<std::string> names = {}) {
  DataSpec s;
  s.path = path;
  s.targets = ScoreTargets::kLabelLists;
  s.columns.label_lists = true;
  s.labels.names = std::move(names);
  return s;
}

TEST(MultiLabelRows, JsonListsAndSeparatedFieldsBecomeMultiHotTargets) {
  TempDir d;
  const std::string jsonl = write_data_file(d, "a.jsonl",
                                            "{\"text\":\"a\",\"label\":[\"sports\",\"news\"]}\n"
                                            "{\"text\":\"b\",\"label\":[]}\n"
                                            "{\"text\":\"c\",\"label\":[\"art\"]}\n");
  RawDataset ds;
  const DatasetReport r = read_dataset(multi_label_spec(jsonl), &ds);
  // The data's labels in byte order: art, news, sports.
  EXPECT_EQ(ds.labels.names, (std::vector<std::string>{"art", "news", "sports"}));
  EXPECT_EQ(ds.targets, (std::vector<float>{0, 1, 1, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(r.class_counts, (std::vector<int64_t>{1, 1, 1}));
  const std::string csv = write_data_file(d, "a.csv", "text,label\nx,news|art\ny,\nz,sports\n");
  RawDataset c;
  read_dataset(multi_label_spec(csv, {"art", "news", "sports"}), &c);
  EXPECT_EQ(c.targets, (std::vector<float>{1, 1, 0, 0, 0, 0, 0, 0, 1}));
}

TEST(MultiLabelRows, UnknownLabelsAndSingleLabelListsNameTheLine) {
  TempDir d;
  const std::string path = write_data_file(d, "a.jsonl",
                                           "{\"text\":\"a\",\"label\":[\"art\"]}\n"
                                           "{\"text\":\"b\",\"label\":[\"art\", \"poetry\"]}\n"
                                           "{\"text\":\"c\",\"label\":\"art\"}\n");
  RawDataset ds;
  const std::string m = input_error_of([&] {
    read_dataset(multi_label_spec(path, {"art", "news"}), &ds);
  });
  EXPECT_THAT(m, HasSubstr(path + ":2: label 'poetry' is not one of the 2 labels"));
  EXPECT_THAT(m,
              HasSubstr(path + ":3: 'label' must be a list of labels (multi-label), got string"));
  // A list on a single-label task.
  DataSpec single;
  single.path = path;
  EXPECT_THAT(input_error_of([&] { read_dataset(single, &ds); }),
              HasSubstr(path + ":1: 'label' is a list of labels, but the task has one label per "
                               "row"));
}

}  // namespace
}  // namespace ftune::data
