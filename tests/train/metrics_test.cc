// Streamed classification metrics against exact references: ROC-AUC and average precision
// computed here by sorting all scores (ties counted half, sklearn's definitions), hand-computed
// confusion-matrix metrics and MCC edge cases, chunked streaming equal to one pass, and decision
// thresholds chosen on validation data only, checked against a brute-force sweep over raw scores.
#include "train/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace ftune {
namespace {

struct Row {
  float logits[2];
  int32_t label;
  double score() const { return double(logits[1]) - double(logits[0]); }
};

// Exact ROC-AUC: P(s_pos > s_neg) + P(s_pos == s_neg) / 2, by sorting.
double exact_auc(std::vector<std::pair<double, int>> s) {  // (score, is positive)
  std::sort(s.begin(), s.end());
  double wins = 0, neg_below = 0, pos = 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    double p = 0, n = 0;
    for (; j < s.size() && s[j].first == s[i].first; ++j) (s[j].second ? p : n) += 1;
    wins += p * (neg_below + 0.5 * n);
    neg_below += n;
    pos += p;
    i = j;
  }
  return wins / (pos * neg_below);
}

double exact_auc(const std::vector<Row>& rows) {
  std::vector<std::pair<double, int>> s;
  for (const Row& r : rows) s.emplace_back(r.score(), r.label);
  return exact_auc(s);
}

// Exact average precision (sklearn.metrics.average_precision_score): tied scores enter together.
double exact_ap(const std::vector<Row>& rows) {
  std::vector<std::pair<double, int>> s;
  for (const Row& r : rows) s.emplace_back(r.score(), r.label);
  std::sort(s.rbegin(), s.rend());
  double positives = 0;
  for (auto& x : s) positives += x.second;
  double ap = 0, tp = 0, fp = 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    double p = 0;
    for (; j < s.size() && s[j].first == s[i].first; ++j) {
      p += s[j].second;
      fp += 1 - s[j].second;
    }
    tp += p;
    ap += (p / positives) * (tp / (tp + fp));
    i = j;
  }
  return ap;
}

// Rows whose score s = logit1 - logit0 is normal with the given means and spread per class, on
// top of a random common offset (only the difference matters).
std::vector<Row> gaussian_rows(size_t n, double pos_fraction, double mu_pos, double mu_neg,
                               double sigma, std::mt19937_64& rng) {
  std::bernoulli_distribution is_pos(pos_fraction);
  std::normal_distribution<double> noise(0, sigma), offset(0, 3);
  std::vector<Row> rows(n);
  for (Row& r : rows) {
    r.label = is_pos(rng);
    const double c = offset(rng), s = (r.label ? mu_pos : mu_neg) + noise(rng);
    r.logits[0] = float(c);
    r.logits[1] = float(c + s);
  }
  return rows;
}

ClassificationMetrics metrics_of(const std::vector<Row>& rows,
                                 EvalSplit split = EvalSplit::Unspecified) {
  ClassificationMetrics m(2, split);
  for (const Row& r : rows) m.add(r.logits, r.label);
  return m;
}

std::vector<Row> rows_from_scores(const std::vector<double>& neg, const std::vector<double>& pos) {
  std::vector<Row> rows;
  for (double s : neg) rows.push_back({{0.0f, float(s)}, 0});
  for (double s : pos) rows.push_back({{0.0f, float(s)}, 1});
  return rows;
}

TEST(MetricsAuc, SklearnDocumentationExample) {
  // sklearn: roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) = 0.75 and
  // average_precision_score(...) = 0.8333333333333333; scores given here as logits of P(1).
  auto logit = [](double p) { return std::log(p / (1 - p)); };
  const auto rows = rows_from_scores({logit(0.1), logit(0.4)}, {logit(0.35), logit(0.8)});
  const ClassificationMetrics m = metrics_of(rows);
  EXPECT_DOUBLE_EQ(m.roc_auc(), 0.75);
  EXPECT_EQ(m.roc_auc_max_error(), 0.0);  // every score in its own bin
  EXPECT_DOUBLE_EQ(m.average_precision(), 0.8333333333333333);
}

TEST(MetricsAuc, TiesCountHalfAndOneClassIsUndefined) {
  // Identical scores for a positive and a negative: AUC 0.5 exactly, with the error bound 0.5.
  const ClassificationMetrics tie = metrics_of(rows_from_scores({1.0}, {1.0}));
  EXPECT_EQ(tie.roc_auc(), 0.5);
  EXPECT_EQ(tie.roc_auc_max_error(), 0.5);
  const ClassificationMetrics only_pos = metrics_of(rows_from_scores({}, {1.0, 2.0}));
  EXPECT_TRUE(std::isnan(only_pos.roc_auc()));
  EXPECT_TRUE(only_pos.to_json()["roc_auc"].is_null());
  // Scores beyond the histogram's range still order correctly against those inside it.
  const ClassificationMetrics wide = metrics_of(rows_from_scores({-40, -3}, {50, 3}));
  EXPECT_EQ(wide.roc_auc(), 1.0);
}

TEST(MetricsAuc, HistogramWithinStatedBoundOfExactOnRealisticData) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE(testing::Message() << "FTUNE_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  struct Case {
    double pos_fraction, mu_pos, mu_neg, sigma;
  };
  // An early, weak model; a typical fine-tuned one; a confident, overfit one (|s| up to ~25).
  for (const Case c :
       {Case{0.5, 0.3, -0.2, 0.8}, Case{0.3, 2.0, -2.0, 1.8}, Case{0.1, 7.0, -7.0, 4.0}}) {
    const auto rows = gaussian_rows(50000, c.pos_fraction, c.mu_pos, c.mu_neg, c.sigma, rng);
    const ClassificationMetrics m = metrics_of(rows);
    const double exact = exact_auc(rows), err = std::abs(m.roc_auc() - exact);
    SCOPED_TRACE(testing::Message() << "mu_pos " << c.mu_pos << " exact AUC " << exact << " error "
                                    << err << " bound " << m.roc_auc_max_error());
    std::printf("AUC exact %.6f histogram error %.2e bound %.2e; AP error %.2e\n", exact, err,
                m.roc_auc_max_error(), std::abs(m.average_precision() - exact_ap(rows)));
    EXPECT_LE(err, m.roc_auc_max_error() + 1e-12);
    EXPECT_LT(m.roc_auc_max_error(), 1e-4);
    EXPECT_LT(err, 1e-4);
    EXPECT_NEAR(m.average_precision(), exact_ap(rows), 1e-3);
  }
}

TEST(MetricsAuc, MultiClassOneVsRestMatchesExactOnSoftmaxProbabilities) {
  // sklearn's roc_auc_score(y, predict_proba, multi_class="ovr", average="macro"): exact per-class
  // AUCs by sorting softmax probabilities, computed here independently of the histogram's scores.
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE(testing::Message() << "FTUNE_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  const int k = 3;
  std::uniform_int_distribution<int> label(0, k - 1);
  std::normal_distribution<double> noise(0, 1.5);
  ClassificationMetrics m(k), chunk_a(k), chunk_b(k);
  std::vector<std::vector<std::pair<double, int>>> ovr(k);  // per class: (P(c), is class c)
  for (int i = 0; i < 30000; ++i) {
    const int y = label(rng);
    float l[k];
    double z = 0;
    for (int c = 0; c < k; ++c) {
      l[c] = float((c == y ? 1.5 : 0.0) + noise(rng));
      z += std::exp(double(l[c]));
    }
    m.add(l, y);
    (i % 2 ? chunk_a : chunk_b).add(l, y);
    for (int c = 0; c < k; ++c) ovr[c].emplace_back(std::exp(double(l[c])) / z, int(c == y));
  }
  double macro = 0;
  for (int c = 0; c < k; ++c) {
    const double exact = exact_auc(ovr[c]);
    macro += exact / k;
    EXPECT_NEAR(m.roc_auc(c), exact, 1e-4) << "class " << c;
  }
  std::printf("3-class macro OvR AUC exact %.6f histogram error %.2e bound %.2e\n", macro,
              std::abs(m.roc_auc() - macro), m.roc_auc_max_error());
  EXPECT_LE(std::abs(m.roc_auc() - macro), m.roc_auc_max_error() + 1e-12);
  EXPECT_LT(std::abs(m.roc_auc() - macro), 1e-4);
  chunk_a.merge(chunk_b);
  EXPECT_EQ(chunk_a.roc_auc(), m.roc_auc());
  // Binary: class 0's one-vs-rest AUC is the complement of class 1's.
  const ClassificationMetrics b = metrics_of(rows_from_scores({-1, 0.5}, {0.2, 2}));
  EXPECT_DOUBLE_EQ(b.roc_auc(1), 0.75);
  EXPECT_DOUBLE_EQ(b.roc_auc(0), 0.25);
}

TEST(MetricsStreaming, ChunksAndMergesEqualOnePass) {
  std::mt19937_64 rng(test::test_seed());
  const auto rows = gaussian_rows(5000, 0.4, 1.0, -1.0, 2.0, rng);
  const ClassificationMetrics whole = metrics_of(rows);
  ClassificationMetrics total(2);
  std::uniform_int_distribution<size_t> chunk(1, 700);
  for (size_t at = 0; at < rows.size();) {
    const size_t n = std::min(chunk(rng), rows.size() - at);
    std::vector<float> logits;
    std::vector<int32_t> labels;
    for (size_t i = at; i < at + n; ++i) {
      logits.insert(logits.end(), rows[i].logits, rows[i].logits + 2);
      labels.push_back(rows[i].label);
    }
    ClassificationMetrics part(2);
    part.add_batch(logits.data(), labels.data(), int64_t(n));
    part.add_loss(0.25 * double(n), int64_t(n));
    total.merge(part);
    at += n;
  }
  ClassificationMetrics whole_with_loss = whole;
  whole_with_loss.add_loss(0.25 * double(rows.size()), int64_t(rows.size()));
  EXPECT_EQ(total.to_json().dump(), whole_with_loss.to_json().dump());
  EXPECT_EQ(total.count(), int64_t(rows.size()));
  EXPECT_DOUBLE_EQ(total.mean_loss(), 0.25);
}

TEST(MetricsConfusion, MultiClassHandComputed) {
  // true\pred [[2, 1, 0], [0, 1, 1], [1, 0, 2]]
  ClassificationMetrics m(3);
  const float p0[] = {1, 0, 0}, p1[] = {0, 1, 0}, p2[] = {0, 0, 1};
  const float* pred[3] = {p0, p1, p2};
  const int counts[3][3] = {{2, 1, 0}, {0, 1, 1}, {1, 0, 2}};
  for (int t = 0; t < 3; ++t)
    for (int p = 0; p < 3; ++p)
      for (int i = 0; i < counts[t][p]; ++i) m.add(pred[p], t);
  EXPECT_DOUBLE_EQ(m.accuracy(), 5.0 / 8.0);
  EXPECT_DOUBLE_EQ(m.macro_precision(), (2.0 / 3 + 1.0 / 2 + 2.0 / 3) / 3);
  EXPECT_DOUBLE_EQ(m.macro_recall(), (2.0 / 3 + 1.0 / 2 + 2.0 / 3) / 3);
  // Gorodkin: (c s - sum p_k t_k) / sqrt((s^2 - sum p^2)(s^2 - sum t^2)) = (40 - 22) / 42
  EXPECT_NEAR(m.mcc(), 18.0 / 42.0, 1e-12);
  const auto j = m.to_json();
  EXPECT_FALSE(j.contains("roc_auc"));
  EXPECT_TRUE(j.contains("macro_roc_auc"));
  EXPECT_EQ(j["confusion"], nlohmann::json::parse("[[2,1,0],[0,1,1],[1,0,2]]"));
  // Beyond kMaxAucLabels no histograms are kept, and AUC is absent.
  ClassificationMetrics many(ClassificationMetrics::kMaxAucLabels + 1);
  EXPECT_FALSE(many.has_auc());
  EXPECT_FALSE(many.to_json().contains("macro_roc_auc"));
  EXPECT_THROW(many.roc_auc(), InternalError);
  EXPECT_THROW(m.add(p0, 3), InputError);  // label outside [0, 3)
}

// 100,000 labels used to need a dense 10^10-cell confusion matrix (std::bad_alloc at the first
// validation; 3,000 labels wrote 9 million numbers per evaluation). Past kMaxConfusionLabels the
// per-class counts give the same metrics (checked here against a brute force over the rows), the
// JSON stays small and carries no matrix, and the flat counts still sum across ranks.
TEST(MetricsConfusion, ManyLabelsNeedNoDenseMatrix) {
  ClassificationMetrics huge(100000);
  EXPECT_TRUE(huge.confusion().empty());
  std::vector<float> row(100000, 0.0f);
  row[777] = 1;
  huge.add(row.data(), 777);
  huge.add(row.data(), 5);
  EXPECT_DOUBLE_EQ(huge.accuracy(), 0.5);
  EXPECT_LT(huge.to_json().dump().size(), 1000u);
  EXPECT_FALSE(huge.to_json().contains("confusion"));

  const int64_t k = ClassificationMetrics::kMaxConfusionLabels + 50;
  std::mt19937_64 rng(test::test_seed());
  std::uniform_int_distribution<int64_t> cls(0, k - 1);
  ClassificationMetrics m(k), a(k), b(k);
  std::vector<double> t(k), p(k), d(k);
  const int64_t n = 3000;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = cls(rng), pred = i % 3 == 0 ? label : cls(rng);
    std::vector<float> logits(k, 0.0f);
    logits[pred] = 1;
    m.add(logits.data(), int32_t(label));
    (i % 2 ? a : b).add(logits.data(), int32_t(label));
    ++t[label];
    ++p[pred];
    if (pred == label) ++d[label];
  }
  double right = 0, f1 = 0, pt = 0, pp = 0, tt = 0;
  for (int64_t c = 0; c < k; ++c) {
    right += d[c];
    const double pr = p[c] ? d[c] / p[c] : 0, rc = t[c] ? d[c] / t[c] : 0;
    f1 += pr + rc > 0 ? 2 * pr * rc / (pr + rc) : 0;
    pt += p[c] * t[c];
    pp += p[c] * p[c];
    tt += t[c] * t[c];
  }
  EXPECT_DOUBLE_EQ(m.accuracy(), right / n);
  EXPECT_NEAR(m.macro_f1(), f1 / k, 1e-12);
  EXPECT_NEAR(m.mcc(), (right * n - pt) / std::sqrt((double(n) * n - pp) * (double(n) * n - tt)),
              1e-12);
  // Two ranks' counts summed element by element equal one pass.
  std::vector<int64_t> sum = a.counts();
  const std::vector<int64_t> other = b.counts();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += other[i];
  ClassificationMetrics reduced(k);
  reduced.set_counts(sum, 0);
  EXPECT_EQ(reduced.to_json().dump(), m.to_json().dump());
}

TEST(MetricsConfusion, MccEdgeCases) {
  // Constant prediction: a zero factor in the denominator, MCC 0 (sklearn returns 0 too).
  EXPECT_EQ(metrics_of(rows_from_scores({1, 2, 3}, {1, 2})).mcc(), 0.0);
  EXPECT_EQ(metrics_of(rows_from_scores({-1, -2, -3}, {-1, -2})).mcc(), 0.0);
  // A single true class, predicted both ways.
  EXPECT_EQ(metrics_of(rows_from_scores({-1, 2, 3}, {})).mcc(), 0.0);
  EXPECT_EQ(ClassificationMetrics(2).mcc(), 0.0);  // no rows
  EXPECT_DOUBLE_EQ(metrics_of(rows_from_scores({-1, -2}, {1, 2, 3})).mcc(), 1.0);
  EXPECT_DOUBLE_EQ(metrics_of(rows_from_scores({1, 2}, {-1, -2, -3})).mcc(), -1.0);
}

TEST(MetricsThreshold, HalfIsTheArgmaxRuleIncludingTiesAndNaN) {
  std::mt19937_64 rng(test::test_seed());
  auto rows = gaussian_rows(3000, 0.5, 0.5, -0.5, 1.0, rng);
  for (size_t i = 0; i < rows.size(); i += 10) rows[i].logits[1] = rows[i].logits[0];  // ties
  rows[1].logits[1] = std::numeric_limits<float>::quiet_NaN();
  const ClassificationMetrics m = metrics_of(rows);
  const BinaryThreshold half = ClassificationMetrics::threshold_at_probability(0.5);
  EXPECT_EQ(half.margin, 0.0);
  EXPECT_EQ(m.confusion_at(half), m.confusion());
  const auto j = m.to_json(half);
  EXPECT_EQ(j["at_threshold"]["f1"], j["f1"]);
  EXPECT_EQ(j["at_threshold"]["mcc"], j["mcc"]);
  EXPECT_THROW(ClassificationMetrics::threshold_at_probability(1.0), InputError);
  EXPECT_THROW(parse_threshold_metric("auc", "eval.threshold_metric"), InputError);
  EXPECT_EQ(parse_threshold_metric("mcc", "k"), ThresholdMetric::Mcc);
}

TEST(MetricsThreshold, HandComputedChoiceAppliedToTestSplit) {
  // Validation: negatives at -3 -2 -1 -0.5 0.2 0.3, positives at 1 2 3. At 0.5 (s > 0): TP 3, FP 2,
  // F1 0.75. Any margin in [0.3, 1) separates them: F1 = MCC = accuracy = 1; the middle, 0.65.
  const ClassificationMetrics val =
      metrics_of(rows_from_scores({-3, -2, -1, -0.5, 0.2, 0.3}, {1, 2, 3}), EvalSplit::Validation);
  EXPECT_DOUBLE_EQ(val.f1(1), 0.75);
  for (ThresholdMetric metric :
       {ThresholdMetric::F1, ThresholdMetric::Mcc, ThresholdMetric::Accuracy}) {
    const BinaryThreshold t = val.best_threshold(metric);
    EXPECT_NEAR(t.margin, 0.65, 1.0 / 2048) << threshold_metric_name(metric);
    EXPECT_NEAR(t.probability, 1 / (1 + std::exp(-0.65)), 1e-3);
    EXPECT_EQ(t.validation_value, 1.0);
    EXPECT_EQ(t.chosen_by, threshold_metric_name(metric));
  }
  // The test split cannot choose a threshold; it is evaluated at the validation one.
  ClassificationMetrics test(2, EvalSplit::Test);
  const float neg[] = {0, 0.5f}, pos[] = {0, 0.8f};
  test.add(neg, 0);
  test.add(pos, 1);
  EXPECT_THROW(test.best_threshold(), InternalError);
  EXPECT_THROW(ClassificationMetrics(2).best_threshold(), InternalError);
  const auto j = test.to_json(val.best_threshold());
  EXPECT_EQ(j["accuracy"], 0.5);  // argmax: both predicted 1
  EXPECT_EQ(j["at_threshold"]["accuracy"], 1.0);
  EXPECT_EQ(j["at_threshold"]["chosen_by"], "f1");
  EXPECT_EQ(j["at_threshold"]["confusion"], nlohmann::json::parse("[[1,0],[0,1]]"));
  EXPECT_THROW(ClassificationMetrics(2, EvalSplit::Validation).best_threshold(), InputError);
}

TEST(MetricsThreshold, F1AndMccHandComputed) {
  // Negatives -3 -2 -1 1, positives 0.5 2 3. Margins in [-1, 0.5): TP 3 FP 1 FN 0, F1 6/7,
  // MCC 9/12. Margins in [1, 2): TP 2 FP 0 FN 1, F1 0.8, MCC 8/sqrt(120). Both pick [-1, 0.5).
  const ClassificationMetrics val =
      metrics_of(rows_from_scores({-3, -2, -1, 1}, {0.5, 2, 3}), EvalSplit::Validation);
  const BinaryThreshold f1 = val.best_threshold(ThresholdMetric::F1);
  const BinaryThreshold mcc = val.best_threshold(ThresholdMetric::Mcc);
  EXPECT_NEAR(f1.validation_value, 6.0 / 7.0, 1e-12);
  EXPECT_NEAR(mcc.validation_value, 0.75, 1e-12);
  EXPECT_NEAR(f1.margin, -0.25, 1.0 / 2048);
  EXPECT_NEAR(mcc.margin, -0.25, 1.0 / 2048);
}

TEST(MetricsThreshold, BestEqualsBruteForceOverRawScores) {
  const uint64_t seed = test::test_seed();
  SCOPED_TRACE(testing::Message() << "FTUNE_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  // Scores on a grid of 1/256 (coarser than the bins, with many ties): every decision a raw cut
  // can make is then one a bin edge makes too, and the two optima must be equal.
  auto rows = gaussian_rows(2000, 0.2, 1.5, -0.5, 1.5, rng);
  for (Row& r : rows) {
    r.logits[1] = float(std::round(r.score() * 256) / 256);
    r.logits[0] = 0;
  }
  const ClassificationMetrics val = metrics_of(rows, EvalSplit::Validation);
  // Every decision a threshold can make: "s > cut" for cuts between consecutive sorted scores.
  std::vector<double> s;
  for (const Row& r : rows) s.push_back(r.score());
  std::sort(s.begin(), s.end());
  for (ThresholdMetric metric :
       {ThresholdMetric::F1, ThresholdMetric::Mcc, ThresholdMetric::Accuracy}) {
    double best = -1;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      if (s[i] == s[i + 1]) continue;
      const double cut = 0.5 * (s[i] + s[i + 1]);
      ClassificationMetrics at(2);
      for (const Row& r : rows) {
        const float l[2] = {0, r.score() > cut ? 1.0f : -1.0f};
        at.add(l, r.label);
      }
      best = std::max(best, metric == ThresholdMetric::F1    ? at.f1(1)
                            : metric == ThresholdMetric::Mcc ? at.mcc()
                                                             : at.accuracy());
    }
    const BinaryThreshold t = val.best_threshold(metric);
    EXPECT_NEAR(t.validation_value, best, 1e-12) << threshold_metric_name(metric);
    // The histogram's confusion at the chosen margin is the raw-score one.
    std::vector<int64_t> raw(4, 0);
    for (const Row& r : rows) ++raw[r.label * 2 + (r.score() > t.margin)];
    EXPECT_EQ(val.confusion_at(t), raw);
  }
}

}  // namespace
}  // namespace ftune
