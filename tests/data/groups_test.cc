// Query groups in the data: a group column in JSONL / CSV / TSV, FlagEmbedding's nested JSONL
// expanded into rows (and its bad lines named), relevance, groups without a positive (warned and
// counted, or refused), and group-aware splits and folds (no group in two parts).
#include "data/groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "data/dataset.h"
#include "data/group_splits.h"
#include "data/token_batch.h"
#include "data_test_util.h"

namespace ftune::data {
namespace {

using test::input_error_of;
using test::write_data_file;
using ::testing::HasSubstr;

DataSpec grp_spec(const std::string& path, const std::string& group = "qid") {
  DataSpec s;
  s.path = path;
  s.columns.group = group;
  return s;
}

TEST(Groups, GroupColumnInJsonlCsvAndTsv) {
  test::TempDir dir;
  const std::string jsonl =
      write_data_file(dir, "a.jsonl",
                      "{\"text\": \"q1\", \"text_pair\": \"a\", \"label\": 1, \"qid\": \"x\"}\n"
                      "{\"text\": \"q2\", \"text_pair\": \"b\", \"label\": 0, \"qid\": 7}\n"
                      "{\"text\": \"q1\", \"text_pair\": \"c\", \"label\": 0, \"qid\": \"x\"}\n"
                      "{\"text\": \"q2\", \"text_pair\": \"d\", \"label\": 1, \"qid\": 7}\n");
  const std::string csv = write_data_file(dir, "a.csv",
                                          "text,text_pair,label,qid\nq1,a,1,x\nq2,b,0,7\nq1,c,0,x\n"
                                          "q2,d,1,7\n");
  const std::string tsv = write_data_file(dir, "a.tsv",
                                          "text\ttext_pair\tlabel\tqid\nq1\ta\t1\tx\nq2\tb\t0\t7\n"
                                          "q1\tc\t0\tx\nq2\td\t1\t7\n");
  for (const std::string& path : {jsonl, csv, tsv}) {
    SCOPED_TRACE(path);
    RawDataset ds;
    const DatasetReport r = read_dataset(grp_spec(path), &ds);
    ASSERT_EQ(ds.examples.size(), 4u);
    EXPECT_EQ(ds.examples[0].group_id, 0);
    EXPECT_EQ(ds.examples[1].group_id, 1);
    EXPECT_EQ(ds.examples[2].group_id, 0);
    EXPECT_EQ(ds.examples[3].group_id, 1);
    EXPECT_EQ(r.groups, 2);
    EXPECT_EQ(r.groups_without_positive, 0);
    EXPECT_EQ(r.to_json()["groups"], 2);
  }
  // The group column missing from a row: a bad row naming it.
  const std::string missing = write_data_file(
      dir, "m.jsonl",
      "{\"text\": \"q\", \"label\": 1, \"qid\": 1}\n{\"text\": \"q\", \"label\": 0}\n");
  RawDataset ds;
  EXPECT_THAT(input_error_of([&] { read_dataset(grp_spec(missing), &ds); }),
              HasSubstr("m.jsonl:2: missing 'qid'"));
  // Not in the header.
  EXPECT_THAT(input_error_of([&] { read_dataset(grp_spec(csv, "query_id"), &ds); }),
              HasSubstr("no column 'query_id'"));
}

TEST(Groups, GroupsWithoutAPositiveAreCountedOrRefused) {
  test::TempDir dir;
  const std::string path = write_data_file(dir, "g.csv",
                                           "text,text_pair,label,qid\nq,a,1,1\nq,b,0,1\n"
                                           "r,c,0,2\nr,d,0,2\ns,e,0,3\ns,f,1,3\n");
  RawDataset ds;
  const DatasetReport r = read_dataset(grp_spec(path), &ds);
  EXPECT_EQ(r.groups, 3);
  EXPECT_EQ(r.groups_without_positive, 1);
  DataSpec strict = grp_spec(path);
  strict.refuse_groups_without_positive = true;
  EXPECT_THAT(input_error_of([&] { read_dataset(strict, &ds); }),
              HasSubstr("g.csv:4: 1 of 3 query groups have no relevant row"));
}

TEST(Groups, FlagEmbeddingNestedRowsExpand) {
  test::TempDir dir;
  const std::string path = write_data_file(
      dir, "fe.jsonl",
      "{\"query\": \"what is a cat\", \"pos\": [\"a cat is an animal\"], \"neg\": [\"rain\", "
      "\"a car\"], \"pos_scores\": [0.9], \"neg_scores\": [0.1, 0.2]}\n"
      "\n"
      "{\"query\": \"sun\", \"pos\": [\"a star\", \"the star of earth\"], \"neg\": [\"moon\"]}\n");
  RawDataset ds;
  const DatasetReport r = read_dataset(DataSpec{path}, &ds);  // auto-detected
  ASSERT_EQ(ds.examples.size(), 6u);
  EXPECT_EQ(r.groups, 2);
  EXPECT_EQ(ds.examples[0].text, "what is a cat");
  EXPECT_EQ(*ds.examples[0].text_pair, "a cat is an animal");
  EXPECT_EQ(ds.examples[0].label, "1");
  EXPECT_EQ(ds.examples[1].label, "0");
  EXPECT_EQ(ds.examples[2].group_id, 0);
  EXPECT_EQ(ds.examples[3].group_id, 1);
  EXPECT_EQ(ds.examples[3].line, 3);
  EXPECT_EQ(ds.examples[4].label, "1");
  EXPECT_EQ(ds.examples[5].text_pair, "moon");
  // Relevance from the labels "0" / "1" (integers: their value).
  EXPECT_EQ(relevance_of(ds.labels, ds.labels.ids.at("1")), 1.0f);
  EXPECT_EQ(relevance_of(ds.labels, ds.labels.ids.at("0")), 0.0f);
}

TEST(Groups, FlagEmbeddingBadLinesNameTheLineAndEntry) {
  test::TempDir dir;
  const auto error_for = [&](const std::string& line) {
    const std::string path = write_data_file(
        dir, "bad.jsonl", "{\"query\": \"q\", \"pos\": [\"p\"], \"neg\": [\"n\"]}\n" + line + "\n");
    DataSpec s{path};
    s.format = DataFormat::kFlagEmbedding;
    RawDataset ds;
    return input_error_of([&] { read_dataset(s, &ds); });
  };
  EXPECT_THAT(error_for("{\"query\": \"q\", \"pos\": [], \"neg\": [\"n\"]}"),
              HasSubstr("bad.jsonl:2: 'pos' is empty"));
  EXPECT_THAT(error_for("{\"query\": \"q\", \"pos\": [\"p\"], \"neg\": [\"n\", 3]}"),
              HasSubstr("bad.jsonl:2: 'neg'[1] must be a string, got integer"));
  EXPECT_THAT(error_for("{\"query\": 5, \"pos\": [\"p\"]}"),
              HasSubstr("bad.jsonl:2: 'query' must be a string"));
  EXPECT_THAT(error_for("{\"pos\": [\"p\"]}"), HasSubstr("bad.jsonl:2: missing 'query'"));
  EXPECT_THAT(error_for("{\"query\": \"q\", \"pos\": [\"p\"], \"pos_scores\": [\"x\"]}"),
              HasSubstr("bad.jsonl:2: 'pos_scores'[0] must be a number"));
  EXPECT_THAT(error_for("{\"query\": \"q\", \"pos\": [\"  \"]}"),
              HasSubstr("bad.jsonl:2: 'pos'[0] is empty"));
  // The JSONL scan the plain reader uses (data/jsonl.h): a number past a double's range is a bad
  // line like any other (it escaped as an unexpected error before), and so is a non-object.
  EXPECT_THAT(error_for("{\"query\": \"q\", \"pos\": [\"p\"], \"pos_scores\": [1e400]}"),
              HasSubstr("bad.jsonl:2: invalid JSON: a number too large for a double"));
  EXPECT_THAT(error_for("[1, 2]"), HasSubstr("bad.jsonl:2: expected a JSON object, got array"));
}

// Score tasks (issue 34): a one-score head's 0/1 targets are the rows' relevance; margin_mse's
// teacher scores make each group's top-scored row its positive; FlagEmbedding rows give their
// pos_scores / neg_scores as the teacher's, required then.
TEST(Groups, ScoreTargetsGiveRelevanceAndFlagEmbeddingTeacherScores) {
  test::TempDir dir;
  const std::string rows = write_data_file(
      dir, "rows.jsonl",
      "{\"text\": \"q\", \"text_pair\": \"a\", \"label\": 1, \"t\": 0.5, \"qid\": \"x\"}\n"
      "{\"text\": \"q\", \"text_pair\": \"b\", \"label\": 0, \"t\": 2.5, \"qid\": \"x\"}\n"
      "{\"text\": \"r\", \"text_pair\": \"c\", \"label\": 0, \"t\": -1, \"qid\": \"y\"}\n"
      "{\"text\": \"r\", \"text_pair\": \"d\", \"label\": 1, \"t\": -1, \"qid\": \"y\"}\n");
  DataSpec unit = grp_spec(rows);
  unit.targets = ScoreTargets::kUnitScores;
  unit.columns.numeric_label = true;
  RawDataset ds;
  DatasetReport r = read_dataset(unit, &ds);
  EXPECT_EQ(ds.relevance, (std::vector<float>{1, 0, 0, 1}));
  EXPECT_EQ(r.groups_without_positive, 0);
  DataSpec teacher = grp_spec(rows);
  teacher.targets = ScoreTargets::kScores;
  teacher.columns.label = "t";
  teacher.columns.numeric_label = true;
  teacher.top_target_relevant = true;
  r = read_dataset(teacher, &ds);
  EXPECT_EQ(ds.targets, (std::vector<float>{0.5f, 2.5f, -1, -1}));
  EXPECT_EQ(ds.relevance, (std::vector<float>{0, 1, 1, 0}));  // the top; ties: the first
  EXPECT_EQ(r.groups_without_positive, 0);
  const std::string fe = write_data_file(
      dir, "fe.jsonl",
      "{\"query\": \"q\", \"pos\": [\"p\"], \"neg\": [\"n\", \"m\"], \"pos_scores\": [3.5], "
      "\"neg_scores\": [-1.25, 0.5]}\n");
  DataSpec nested{fe};
  nested.targets = ScoreTargets::kScores;
  nested.columns.teacher_scores = true;
  nested.top_target_relevant = true;
  r = read_dataset(nested, &ds);
  EXPECT_EQ(ds.targets, (std::vector<float>{3.5f, -1.25f, 0.5f}));
  EXPECT_EQ(ds.relevance, (std::vector<float>{1, 0, 0}));
  const std::string no_scores = write_data_file(
      dir, "fe2.jsonl", "{\"query\": \"q\", \"pos\": [\"p\"], \"neg\": [\"n\"]}\n");
  nested.path = no_scores;
  EXPECT_THAT(input_error_of([&] { read_dataset(nested, &ds); }),
              HasSubstr("fe2.jsonl:1: missing 'pos_scores'"));
}

TEST(Groups, RelevanceOfNamedAndGradedLabels) {
  const LabelSet named = LabelSet::from_names({"neg", "pos"});
  EXPECT_EQ(relevance_of(named, 0), 0.0f);
  EXPECT_EQ(relevance_of(named, 1), 1.0f);
  const LabelSet graded = LabelSet::from_names({"0", "1", "2", "3"});
  EXPECT_EQ(relevance_of(graded, 3), 3.0f);
}

// Every group in exactly one part; the parts cover every example.
void grp_expect_whole_groups(const std::vector<int64_t>& group_ids,
                             const std::vector<std::vector<int64_t>>& parts) {
  std::map<int64_t, int> part_of;
  std::set<int64_t> seen;
  for (size_t p = 0; p < parts.size(); ++p)
    for (int64_t i : parts[p]) {
      EXPECT_TRUE(seen.insert(i).second) << "example " << i << " twice";
      if (group_ids[i] < 0) continue;
      auto [it, fresh] = part_of.emplace(group_ids[i], static_cast<int>(p));
      EXPECT_EQ(it->second, static_cast<int>(p)) << "group " << group_ids[i] << " split";
    }
  EXPECT_EQ(seen.size(), group_ids.size());
}

std::vector<int64_t> grp_ids(int64_t groups, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids;
  for (int64_t g = 0; g < groups; ++g)
    for (uint64_t r = 0; r < 2 + rng() % 9; ++r) ids.push_back(g);
  ids.push_back(-1);  // an example without a group: a group of its own
  for (int64_t i = static_cast<int64_t>(ids.size()) - 1; i > 0; --i)
    std::swap(ids[i], ids[rng() % (i + 1)]);
  return ids;
}

TEST(GroupSplits, SplitKeepsGroupsWholeAndIsDeterministic) {
  const auto ids = grp_ids(60, 5);
  const SplitIndices s = group_split(ids, 0.2, 0.1, 42);
  grp_expect_whole_groups(ids, {s.train, s.validation, s.test});
  const auto n = static_cast<double>(ids.size());
  const auto val = static_cast<int64_t>(s.validation.size());
  EXPECT_GE(val, std::llround(0.2 * n));
  EXPECT_LT(val, std::llround(0.2 * n) + 11);  // overshoot: less than the largest group
  EXPECT_GE(static_cast<int64_t>(s.test.size()), std::llround(0.1 * n));
  EXPECT_EQ(group_split(ids, 0.2, 0.1, 42).validation, s.validation);
  EXPECT_NE(group_split(ids, 0.2, 0.1, 43).validation, s.validation);
  EXPECT_THAT(input_error_of([&] { group_split(ids, 0.99, 0.0, 1); }),
              HasSubstr("leave no group for training"));
}

TEST(GroupSplits, FoldsKeepGroupsWholeAndBalanceRows) {
  const auto ids = grp_ids(50, 9);
  const int64_t k = 5;
  std::vector<std::vector<int64_t>> folds;
  for (int64_t f = 0; f < k; ++f) {
    const Fold fold = group_fold(ids, k, f, 7);
    EXPECT_EQ(fold.train.size() + fold.validation.size(), ids.size());
    folds.push_back(fold.validation);
  }
  grp_expect_whole_groups(ids, folds);
  size_t lo = ids.size(), hi = 0;
  for (const auto& f : folds) {
    lo = std::min(lo, f.size());
    hi = std::max(hi, f.size());
  }
  EXPECT_LE(hi - lo, 10u);  // at most the largest group apart
  EXPECT_EQ(group_fold_ids(ids, k, 7), group_fold_ids(ids, k, 7));
  EXPECT_THAT(input_error_of([&] {
                group_fold_ids({0, 0, 1, 1}, 3, 1);
              }),
              HasSubstr("only 2 query groups"));
}

}  // namespace
}  // namespace ftune::data

namespace ftune {
namespace {

// A right-padded step batch whose row r has lengths[r] real tokens.
Batch grp_batch(const std::vector<int64_t>& lengths) {
  Batch b;
  b.size = static_cast<int64_t>(lengths.size());
  b.seq_len = *std::max_element(lengths.begin(), lengths.end());
  b.input_ids.assign(b.size * b.seq_len, 0);
  b.attention_mask.assign(b.size * b.seq_len, 0);
  for (int64_t r = 0; r < b.size; ++r)
    for (int64_t t = 0; t < lengths[r]; ++t) b.attention_mask[r * b.seq_len + t] = 1;
  return b;
}

TEST(GroupCuts, MicroBatchesHoldWholeGroupsPaddedAndPacked) {
  // 5 groups of 3 rows.
  const Batch b = grp_batch({2, 3, 2, 4, 4, 4, 1, 1, 1, 6, 5, 6, 2, 2, 2});
  using Cuts = std::vector<std::pair<int64_t, int64_t>>;
  // Padded, 7 rows at most: 2 groups a micro-batch.
  EXPECT_EQ(micro_batch_cuts(b, BatchLayout::Padded, 7, 0, 0, -1, 3),
            (Cuts{{0, 6}, {6, 6}, {12, 3}}));
  // Fewer rows than a group: a group alone.
  EXPECT_EQ(micro_batch_cuts(b, BatchLayout::Padded, 2, 0, 0, -1, 3).size(), 5u);
  // Packed, 12 tokens at most: groups of 7, 12, 3, 17 (alone), 6 tokens.
  EXPECT_EQ(micro_batch_cuts(b, BatchLayout::Packed, 15, 12, 0, -1, 3),
            (Cuts{{0, 3}, {3, 3}, {6, 3}, {9, 3}, {12, 3}}));
  EXPECT_EQ(micro_batch_cuts(b, BatchLayout::Packed, 15, 16, 0, -1, 3),
            (Cuts{{0, 3}, {3, 6}, {9, 3}, {12, 3}}));
  // Group size 1 is the row-wise cut.
  EXPECT_EQ(micro_batch_cuts(b, BatchLayout::Padded, 7, 0),
            micro_batch_cuts(b, BatchLayout::Padded, 7, 0, 0, -1, 1));
}

}  // namespace
}  // namespace ftune
