// Ranking metrics vs scikit-learn's ndcg_score and trec_eval (pytrec_eval) averaged over the
// tied orders (tests/fixtures/ranking/metrics.json, tools/make_ranking_fixtures.py), plus the
// tie rule, skipped groups, streaming, the row score and the eval.metric names.
#include "train/ranking_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "test_util.h"

namespace ftune::test {
namespace {

nlohmann::json ranking_fixture() {
  std::ifstream in(fixtures_dir() + "/ranking/metrics.json");
  return nlohmann::json::parse(in);
}

std::vector<RankingMetricSpec> fixture_specs(const nlohmann::json& f) {
  std::vector<RankingMetricSpec> specs;
  for (int64_t k : f["ks"].get<std::vector<int64_t>>()) {
    specs.push_back({RankingMeasure::Ndcg, k});
    specs.push_back({RankingMeasure::Mrr, k});
    specs.push_back({RankingMeasure::Recall, k});
  }
  specs.push_back({RankingMeasure::Mrr, 0});
  specs.push_back({RankingMeasure::Map, 0});
  specs.push_back({RankingMeasure::GroupAccuracy, 0});
  return specs;
}

TEST(RankingMetrics, EachGroupMatchesSklearnAndTrecEval) {
  const auto f = ranking_fixture();
  int64_t checked = 0;
  for (const auto& g : f["groups"]) {
    const auto rel = g["relevance"].get<std::vector<double>>();
    const auto score = g["score"].get<std::vector<double>>();
    for (const auto& spec : fixture_specs(f)) {
      const double got = group_value(spec, rel, score);
      if (g["expected"].is_null()) {
        EXPECT_TRUE(std::isnan(got)) << "group " << g["id"] << " " << spec.name();
        continue;
      }
      EXPECT_NEAR(got, g["expected"][spec.name()].get<double>(), 1e-12)
          << "group " << g["id"] << " " << spec.name();
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

TEST(RankingMetrics, StreamedMeansMatchTheReferenceAndSkipGroupsWithoutPositive) {
  const auto f = ranking_fixture();
  // Rows interleaved across groups (the order of a shuffled validation file), in two halves
  // merged, as two ranks would.
  std::vector<std::tuple<int64_t, double, double>> rows;
  for (const auto& g : f["groups"]) {
    const auto rel = g["relevance"].get<std::vector<double>>();
    const auto score = g["score"].get<std::vector<double>>();
    for (size_t i = 0; i < rel.size(); ++i)
      rows.emplace_back(g["id"].get<int64_t>(), rel[i], score[i]);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::get<1>(a) < std::get<1>(b);  // mixes groups; keeps each group's row order
  });
  RankingMetrics a, b;
  for (size_t i = 0; i < rows.size(); ++i)
    (i % 2 ? b : a).add(std::get<0>(rows[i]), std::get<1>(rows[i]), std::get<2>(rows[i]));
  a.merge(b);
  EXPECT_EQ(a.rows(), static_cast<int64_t>(rows.size()));
  EXPECT_EQ(a.groups(), static_cast<int64_t>(f["groups"].size()));
  EXPECT_EQ(a.groups_without_positive(), f["groups_without_positive"].get<int64_t>());
  EXPECT_GT(a.groups_without_positive(), 0);
  for (const auto& spec : fixture_specs(f))
    EXPECT_NEAR(a.mean(spec), f["means"][spec.name()].get<double>(), 1e-12) << spec.name();
  const auto j = a.to_json({{RankingMeasure::Mrr, 3}});
  EXPECT_NEAR(j["mrr@3"].get<double>(), f["means"]["mrr@3"].get<double>(), 1e-12);
  EXPECT_NEAR(j["group_accuracy"].get<double>(), f["means"]["group_accuracy"].get<double>(), 1e-12);
  EXPECT_EQ(j["groups_evaluated"].get<int64_t>(), a.groups() - a.groups_without_positive());
}

TEST(RankingMetrics, TiesAreAveragedSoAConstantScorerGainsNothingFromRowOrder) {
  // The positive first and every score equal: the expectation over orders, not rank 1.
  const std::vector<double> rel{1, 0, 0, 0}, score{0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(group_value({RankingMeasure::GroupAccuracy, 0}, rel, score), 0.25);
  EXPECT_DOUBLE_EQ(group_reciprocal_rank(rel, score, 0), (1 + 1 / 2. + 1 / 3. + 1 / 4.) / 4);
  EXPECT_DOUBLE_EQ(group_recall(rel, score, 2), 0.5);
  // Distinct scores: the plain definitions.
  const std::vector<double> s2{0.1, 0.9, 0.5, -1};  // positive ranked 3rd
  EXPECT_DOUBLE_EQ(group_reciprocal_rank(rel, s2, 0), 1 / 3.);
  EXPECT_DOUBLE_EQ(group_reciprocal_rank(rel, s2, 2), 0.0);
  EXPECT_DOUBLE_EQ(group_average_precision(rel, s2), 1 / 3.);
  EXPECT_DOUBLE_EQ(group_ndcg(rel, s2, 10), 1 / std::log2(4.0));
  EXPECT_DOUBLE_EQ(group_value({RankingMeasure::GroupAccuracy, 0}, rel, s2), 0.0);
  // NaN scores rank last.
  const std::vector<double> s3{NAN, 0.5, 0.2, 0.1};
  EXPECT_DOUBLE_EQ(group_reciprocal_rank(rel, s3, 0), 1 / 4.);
}

TEST(RankingMetrics, BadRelevanceIsAnInputError) {
  RankingMetrics m;
  EXPECT_THROW(m.add(1, -1.0, 0.0), InputError);
  EXPECT_THROW(m.add(1, NAN, 0.0), InputError);
  EXPECT_THROW(group_ndcg({1, -2}, {0, 1}, 3), InputError);
}

TEST(RankingMetrics, RowScoreFromOneOrTwoLogits) {
  const float one[] = {1.5f}, two[] = {0.25f, 2.0f}, three[] = {0, 1, 2};
  EXPECT_DOUBLE_EQ(row_score(one, 1), 1.5);
  EXPECT_DOUBLE_EQ(row_score(two, 2), 1.75);
  EXPECT_THROW(row_score(three, 3), InputError);
}

TEST(RankingMetrics, MetricNames) {
  auto spec = parse_ranking_metric("ndcg@10", "eval.metric");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->measure, RankingMeasure::Ndcg);
  EXPECT_EQ(spec->k, 10);
  EXPECT_EQ(spec->name(), "ndcg@10");
  EXPECT_EQ(parse_ranking_metric("map", "k")->measure, RankingMeasure::Map);
  EXPECT_EQ(parse_ranking_metric("group_accuracy", "k")->name(), "group_accuracy");
  EXPECT_EQ(parse_ranking_metric("mrr", "k")->k, 0);
  EXPECT_FALSE(parse_ranking_metric("f1", "k"));
  EXPECT_FALSE(parse_ranking_metric("accuracy", "k"));
  EXPECT_THROW(parse_ranking_metric("ndcg@0", "eval.metric"), InputError);
  EXPECT_THROW(parse_ranking_metric("ndcg@x", "eval.metric"), InputError);
  EXPECT_THROW(parse_ranking_metric("map@3", "eval.metric"), InputError);
  EXPECT_THROW(parse_ranking_metric("recall", "eval.metric"), InputError);
}

}  // namespace
}  // namespace ftune::test
