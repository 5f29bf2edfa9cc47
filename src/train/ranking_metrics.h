// Ranking metrics over query groups: per-group NDCG@k, MRR@k, MAP, recall@k and group accuracy
// (top-1), averaged over the groups that have a relevant row. Rows arrive as (group id, relevance,
// score) in any order; a validation set fits in memory, so each group keeps its rows.
//
// Definitions (one group, rows ranked by score, highest first; R = number of relevant rows, a row
// being relevant when its relevance > 0; relevance is graded or binary, never negative):
//   NDCG@k   sum_{i<k} rel_(i) / log2(i + 2), over the same for the ideal order (linear gain, as
//            scikit-learn's ndcg_score and trec_eval's ndcg_cut)
//   MRR@k    1 / rank of the first relevant row when that rank is <= k, else 0 (trec_eval
//            recip_rank, cut at k)
//   MAP      mean over the relevant rows of the precision at their rank (trec_eval map: divides by
//            R, every relevant row is ranked)
//   recall@k relevant rows in the top k / R (trec_eval recall_k)
//   group accuracy  whether the top row is relevant (trec_eval P_1)
// k larger than the group: the whole group counts (NDCG@k = NDCG, recall@k = 1).
// Ties: every metric is its expected value over the orders of tied scores, each equally likely —
// scikit-learn's rule for ndcg_score (ignore_ties=False, "average over tied orders"), applied to
// all five. So a constant scorer gets group accuracy R / n, never 1 because the positive happens
// to come first in the file. Computed exactly, not by sampling (ranking_metrics.cc).
// Groups without a relevant row are skipped (every metric is 0/0 there) and counted.
// tools/make_ranking_fixtures.py checks each definition against scikit-learn and pytrec_eval
// (averaged over the tied orders) on committed fixtures.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ftune {

// The ranking score of one row from its logits: one label -> the logit itself; two labels ->
// logit[1] - logit[0] (the log-odds of class 1, which softmax-over-a-group training ranks by).
// More labels have no single score: InputError.
double row_score(const float* logits, int64_t num_labels);

enum class RankingMeasure { Ndcg, Mrr, Map, Recall, GroupAccuracy };

// A ranking metric as eval.metric names it: "ndcg@10", "mrr@10", "map", "recall@5",
// "group_accuracy" ("ndcg" and "mrr" alone: no cutoff).
struct RankingMetricSpec {
  RankingMeasure measure = RankingMeasure::Ndcg;
  int64_t k = 0;  // cutoff; 0 = the whole group
  std::string name() const;
};
// nullopt when `name` is not a ranking metric's name; InputError naming `key` when it is one
// with a bad cutoff ("ndcg@0", "ndcg@x", "map@3", "group_accuracy@2").
std::optional<RankingMetricSpec> parse_ranking_metric(const std::string& name,
                                                      const std::string& key);

// One group's metrics, ties averaged (see above). `relevance` and `score` have the same length;
// InputError on a negative or non-finite relevance. NaN when the group has no relevant row.
double group_ndcg(const std::vector<double>& relevance, const std::vector<double>& score,
                  int64_t k);
double group_reciprocal_rank(const std::vector<double>& relevance, const std::vector<double>& score,
                             int64_t k);
double group_average_precision(const std::vector<double>& relevance,
                               const std::vector<double>& score);
double group_recall(const std::vector<double>& relevance, const std::vector<double>& score,
                    int64_t k);
double group_value(const RankingMetricSpec& spec, const std::vector<double>& relevance,
                   const std::vector<double>& score);

class RankingMetrics {
 public:
  // One row. NaN scores rank below every number (they still count as rows).
  void add(int64_t group, double relevance, double score);
  // Rows of another object (rows of one group split between the two join up).
  void merge(const RankingMetrics& other);

  int64_t rows() const { return rows_; }
  int64_t groups() const { return static_cast<int64_t>(groups_.size()); }
  int64_t groups_without_positive() const;
  int64_t groups_evaluated() const { return groups() - groups_without_positive(); }

  // Means over the groups with a relevant row (NaN when there is none).
  double mean(const RankingMetricSpec& spec) const;
  double ndcg(int64_t k) const { return mean({RankingMeasure::Ndcg, k}); }
  double mrr(int64_t k) const { return mean({RankingMeasure::Mrr, k}); }
  double map() const { return mean({RankingMeasure::Map, 0}); }
  double recall(int64_t k) const { return mean({RankingMeasure::Recall, k}); }
  double group_accuracy() const { return mean({RankingMeasure::GroupAccuracy, 0}); }

  // {"groups", "groups_evaluated", "groups_without_positive", "rows", "ndcg@1", "ndcg@3",
  //  "ndcg@5", "ndcg@10", "mrr@10", "map", "recall@1", "recall@3", "recall@5", "recall@10",
  //  "group_accuracy"} plus any `extra` metric (eval.metric); NaN -> null.
  nlohmann::json to_json(const std::vector<RankingMetricSpec>& extra = {}) const;

  struct Row {
    double relevance, score;
  };
  const std::map<int64_t, std::vector<Row>>& group_rows() const { return groups_; }

 private:
  std::map<int64_t, std::vector<Row>> groups_;  // by group id: rows in arrival order
  int64_t rows_ = 0;
};

// Adds m.to_json()'s metrics (and `eval_metric` when it names a ranking metric) to an evaluation's
// JSON at the top level, where eval.metric, early stopping and the HPO objective look them up; its
// "rows" is left out (the classification metrics' own).
void add_ranking_metrics(nlohmann::json& eval, const RankingMetrics& m,
                         const std::string& eval_metric);

}  // namespace ftune
