// Listwise step batches (train/group_sampler.h): whole groups of 1 positive first and
// group_size - 1 negatives of the same query, FlagEmbedding's repeat rule for short groups,
// skipped groups counted, deterministic per (seed, epoch), seekable to any step.
#include "train/group_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace ftune::test {
namespace {

// Groups g = 0..n-1 with `pos[g]` positives and `neg[g]` negatives, rows interleaved.
std::vector<data::TokenizedExample> sampler_rows(const std::vector<int>& pos,
                                                 const std::vector<int>& neg) {
  std::vector<data::TokenizedExample> rows;
  for (size_t g = 0; g < pos.size(); ++g) {
    for (int i = 0; i < pos[g] + neg[g]; ++i) {
      data::TokenizedExample e;
      e.group = static_cast<int64_t>(g);
      e.relevance = i < pos[g] ? 1.0f : 0.0f;
      e.label = i < pos[g] ? 1 : 0;
      rows.push_back(e);
    }
  }
  return rows;
}

TEST(GroupSampler, StepsHoldWholeGroupsPositiveFirst) {
  const auto rows = sampler_rows({1, 2, 1, 1, 3, 1, 1}, {9, 7, 2, 12, 8, 7, 1});
  const int64_t gs = 8;
  GroupSampler s(&rows, gs, 3, 42);
  EXPECT_EQ(s.groups(), 7);
  EXPECT_EQ(s.batches_per_epoch(), 3);  // 3 + 3 + 1 groups
  EXPECT_EQ(s.padded_groups(), 2);      // 2 and 1 negatives
  const auto steps = s.epoch(0);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].size(), 3u * gs);
  EXPECT_EQ(steps[2].size(), 1u * gs);
  std::map<int64_t, int> seen_groups;
  for (const auto& step : steps)
    for (size_t at = 0; at < step.size(); at += gs) {
      const int64_t g = rows[step[at]].group;
      ++seen_groups[g];
      EXPECT_GT(rows[step[at]].relevance, 0.0f);  // the positive first
      std::map<int64_t, int> uses;
      for (int64_t k = 1; k < gs; ++k) {
        EXPECT_EQ(rows[step[at + k]].group, g);
        EXPECT_EQ(rows[step[at + k]].relevance, 0.0f);
        ++uses[step[at + k]];
      }
      const int negatives = static_cast<int>(uses.size());
      if (g == 2) {  // 2 negatives, 7 drawn from each repeated 4 times: 3 or 4 of each
        EXPECT_EQ(negatives, 2);
        for (auto [row, n] : uses) EXPECT_TRUE(n == 3 || n == 4) << n;
      } else if (g == 6) {  // 1 negative: 7 times
        EXPECT_EQ(uses.begin()->second, 7);
      } else {  // enough negatives: no repeats
        EXPECT_EQ(negatives, gs - 1);
      }
    }
  EXPECT_EQ(seen_groups.size(), 7u);  // every group once an epoch
}

TEST(GroupSampler, DeterministicPerSeedAndEpochAndSeekable) {
  const auto rows = sampler_rows({1, 1, 1, 1, 1}, {20, 20, 20, 20, 20});
  GroupSampler a(&rows, 4, 2, 7), b(&rows, 4, 2, 7), c(&rows, 4, 2, 8);
  EXPECT_EQ(a.epoch(0), b.epoch(0));
  EXPECT_NE(a.epoch(0), a.epoch(1));  // negatives redrawn each epoch
  EXPECT_NE(a.epoch(0), c.epoch(0));
  // batch(step) seeks anywhere: a resumed run sees the same steps.
  const auto e1 = a.epoch(1);
  EXPECT_EQ(b.batch(a.batches_per_epoch() + 1), e1[1]);
  EXPECT_EQ(b.batch(0), a.epoch(0)[0]);
}

TEST(GroupSampler, AStepsGroupsAreOrderedByTheirLongestRow) {
  auto rows = sampler_rows({1, 1, 1, 1, 1, 1}, {3, 3, 3, 3, 3, 3});
  for (size_t i = 0; i < rows.size(); ++i)  // group g's rows are 10 * ((g * 7) % 6) + i % 3 long
    rows[i].input_ids.assign(10 * ((rows[i].group * 7) % 6) + i % 3 + 1, 1);
  GroupSampler s(&rows, 4, 6, 3);
  const auto step = s.epoch(0).at(0);
  ASSERT_EQ(step.size(), 24u);
  size_t previous = 0;
  for (size_t at = 0; at < step.size(); at += 4) {
    size_t longest = 0;
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(rows[step[at + k]].group, rows[step[at]].group);
      longest = std::max(longest, rows[step[at + k]].input_ids.size());
    }
    EXPECT_GE(longest, previous);
    previous = longest;
  }
}

TEST(GroupSampler, GroupsWithoutPositiveOrNegativeAreSkippedAndCounted) {
  const auto rows = sampler_rows({0, 1, 2, 1}, {5, 0, 3, 4});
  GroupSampler s(&rows, 4, 8, 1);
  EXPECT_EQ(s.groups(), 2);
  EXPECT_EQ(s.skipped_without_positive(), 1);
  EXPECT_EQ(s.skipped_without_negative(), 1);
  const auto none = sampler_rows({0, 0}, {3, 3});
  EXPECT_THROW(GroupSampler(&none, 4, 8, 1), InputError);
  auto ungrouped = sampler_rows({1}, {3});
  ungrouped[2].group = -1;
  EXPECT_THROW(GroupSampler(&ungrouped, 4, 8, 1), InputError);
  EXPECT_THROW(GroupSampler(&rows, 1, 8, 1), InputError);
}

}  // namespace
}  // namespace ftune::test
