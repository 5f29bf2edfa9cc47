// Ranking metrics: each group's rows sorted by score into blocks of tied scores, and each metric's
// exact expectation over the orders within the blocks (ranking_metrics.h).
//
// A block starts at 0-based position a, holds t rows of which r are relevant, with gain sum G and
// c relevant rows before it. Over the t! orders of the block, each row sits at each of its t
// positions with probability 1/t, so:
//   DCG@k     sum over blocks of (G / t) * sum_{a <= p < min(a + t, k)} 1 / log2(p + 2)
//             (scikit-learn's _tie_averaged_dcg)
//   recall@k  sum over blocks of r * |[a, a + t) ∩ [0, k)| / t, over R
//   P@1       r / t of the first block
//   RR@k      in the first block with r > 0: the first relevant row is at a + j with probability
//             P(j) = C(t-1-j, r-1) / C(t, r) (P(0) = r/t, P(j+1) = P(j) (t-j-r) / (t-1-j)), and
//             RR = sum_j P(j) [a + j < k] / (a + j + 1)
//   AP        a relevant row at a + p (p uniform) has, in expectation, (r-1) p / (t-1) relevant
//             block rows ahead of it, so its expected precision is
//             (c + 1 + (r-1) p / (t-1)) / (a + p + 1) (the denominator is fixed given p): the
//             block adds r / t * sum_p of that, and AP is the sum over blocks over R.
#include "train/ranking_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"

namespace ftune {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A group sorted by score, cut into blocks of equal scores.
struct Block {
  int64_t start, size, relevant;
  double gain;
};

double rank_key(double score) {
  return std::isnan(score) ? -std::numeric_limits<double>::infinity() : score;
}

std::vector<Block> tied_blocks(const std::vector<double>& rel, const std::vector<double>& score) {
  if (rel.size() != score.size())
    throw InternalError(
        fmt::format("ranking metrics: {} relevances for {} scores", rel.size(), score.size()));
  const int64_t n = static_cast<int64_t>(rel.size());
  for (int64_t i = 0; i < n; ++i)
    if (!(rel[i] >= 0) || !std::isfinite(rel[i]))
      throw InputError(fmt::format(
          "ranking metrics: relevance {} of a row is not a finite number >= 0", rel[i]));
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return rank_key(score[x]) > rank_key(score[y]); });
  std::vector<Block> blocks;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    Block b{i, 0, 0, 0.0};
    while (j < n && rank_key(score[order[j]]) == rank_key(score[order[i]])) {
      b.gain += rel[order[j]];
      if (rel[order[j]] > 0) ++b.relevant;
      ++j;
    }
    b.size = j - i;
    blocks.push_back(b);
    i = j;
  }
  return blocks;
}

int64_t relevant_count(const std::vector<double>& rel) {
  return std::count_if(rel.begin(), rel.end(), [](double r) { return r > 0; });
}

int64_t cutoff(int64_t k, int64_t n) {
  return k <= 0 ? n : std::min(k, n);
}

double discount(int64_t position) {
  return 1.0 / std::log2(static_cast<double>(position) + 2.0);
}

}  // namespace

double row_score(const float* logits, int64_t num_labels) {
  if (num_labels == 1) return logits[0];
  if (num_labels == 2) return static_cast<double>(logits[1]) - static_cast<double>(logits[0]);
  throw InputError(fmt::format(
      "a ranking score needs a model with 1 or 2 labels (the score, or logit[1] - logit[0]); "
      "this one has {}",
      num_labels));
}

std::string RankingMetricSpec::name() const {
  auto at = [&](const char* base) {
    return k > 0 ? fmt::format("{}@{}", base, k) : std::string(base);
  };
  switch (measure) {
    case RankingMeasure::Ndcg:
      return at("ndcg");
    case RankingMeasure::Mrr:
      return at("mrr");
    case RankingMeasure::Map:
      return "map";
    case RankingMeasure::Recall:
      return at("recall");
    case RankingMeasure::GroupAccuracy:
      return "group_accuracy";
  }
  return "?";
}

std::optional<RankingMetricSpec> parse_ranking_metric(const std::string& name,
                                                      const std::string& key) {
  const auto at = name.find('@');
  const std::string base = name.substr(0, at);
  RankingMetricSpec spec;
  if (base == "ndcg") {
    spec.measure = RankingMeasure::Ndcg;
  } else if (base == "mrr") {
    spec.measure = RankingMeasure::Mrr;
  } else if (base == "map") {
    spec.measure = RankingMeasure::Map;
  } else if (base == "recall") {
    spec.measure = RankingMeasure::Recall;
  } else if (base == "group_accuracy") {
    spec.measure = RankingMeasure::GroupAccuracy;
  } else {
    return std::nullopt;
  }
  if (at == std::string::npos) {
    if (spec.measure == RankingMeasure::Recall)
      throw InputError(fmt::format("{}: \"recall\" needs a cutoff, e.g. recall@10", key));
    return spec;
  }
  const std::string digits = name.substr(at + 1);
  const bool takes_k = spec.measure == RankingMeasure::Ndcg ||
                       spec.measure == RankingMeasure::Mrr ||
                       spec.measure == RankingMeasure::Recall;
  const bool numeric =
      !digits.empty() && digits.size() <= 9 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!takes_k || !numeric || std::stoll(digits) < 1)
    throw InputError(fmt::format(
        "{}: bad ranking metric \"{}\" (expected ndcg@K, mrr@K, recall@K with K >= 1, map or "
        "group_accuracy)",
        key, name));
  spec.k = std::stoll(digits);
  return spec;
}

double group_ndcg(const std::vector<double>& rel, const std::vector<double>& score, int64_t k) {
  const auto blocks = tied_blocks(rel, score);
  const int64_t n = static_cast<int64_t>(rel.size()), kk = cutoff(k, n);
  std::vector<double> ideal = rel;
  std::sort(ideal.begin(), ideal.end(), std::greater<double>());
  double idcg = 0.0;
  for (int64_t p = 0; p < kk; ++p) idcg += ideal[p] * discount(p);
  if (idcg == 0.0) return kNaN;
  double dcg = 0.0;
  for (const Block& b : blocks) {
    double d = 0.0;
    for (int64_t p = b.start; p < std::min(b.start + b.size, kk); ++p) d += discount(p);
    dcg += b.gain / b.size * d;
  }
  return dcg / idcg;
}

double group_reciprocal_rank(const std::vector<double>& rel, const std::vector<double>& score,
                             int64_t k) {
  const auto blocks = tied_blocks(rel, score);
  const int64_t n = static_cast<int64_t>(rel.size()), kk = cutoff(k, n);
  for (const Block& b : blocks) {
    if (b.relevant == 0) continue;
    const int64_t t = b.size, r = b.relevant;
    double rr = 0.0, p = static_cast<double>(r) / t;  // P(first relevant at block offset j)
    for (int64_t j = 0; j <= t - r; ++j) {
      if (b.start + j < kk) rr += p / static_cast<double>(b.start + j + 1);
      if (j + 1 <= t - r) p *= static_cast<double>(t - j - r) / static_cast<double>(t - 1 - j);
    }
    return rr;
  }
  return kNaN;
}

double group_average_precision(const std::vector<double>& rel, const std::vector<double>& score) {
  const auto blocks = tied_blocks(rel, score);
  const int64_t R = relevant_count(rel);
  if (R == 0) return kNaN;
  double sum = 0.0;
  int64_t before = 0;
  for (const Block& b : blocks) {
    if (b.relevant > 0) {
      const int64_t t = b.size, r = b.relevant;
      double block = 0.0;
      for (int64_t p = 0; p < t; ++p) {
        const double ahead = t > 1 ? static_cast<double>(r - 1) * p / (t - 1) : 0.0;
        block += (before + 1 + ahead) / static_cast<double>(b.start + p + 1);
      }
      sum += static_cast<double>(r) / t * block;
    }
    before += b.relevant;
  }
  return sum / R;
}

double group_recall(const std::vector<double>& rel, const std::vector<double>& score, int64_t k) {
  const auto blocks = tied_blocks(rel, score);
  const int64_t n = static_cast<int64_t>(rel.size()), kk = cutoff(k, n);
  const int64_t R = relevant_count(rel);
  if (R == 0) return kNaN;
  double found = 0.0;
  for (const Block& b : blocks) {
    const int64_t inside = std::max<int64_t>(0, std::min(b.start + b.size, kk) - b.start);
    found += static_cast<double>(b.relevant) * inside / b.size;
  }
  return found / R;
}

double group_value(const RankingMetricSpec& spec, const std::vector<double>& rel,
                   const std::vector<double>& score) {
  switch (spec.measure) {
    case RankingMeasure::Ndcg:
      return group_ndcg(rel, score, spec.k);
    case RankingMeasure::Mrr:
      return group_reciprocal_rank(rel, score, spec.k);
    case RankingMeasure::Map:
      return group_average_precision(rel, score);
    case RankingMeasure::Recall:
      return group_recall(rel, score, spec.k);
    case RankingMeasure::GroupAccuracy: {
      if (relevant_count(rel) == 0) return kNaN;
      const auto blocks = tied_blocks(rel, score);
      return static_cast<double>(blocks[0].relevant) / blocks[0].size;
    }
  }
  return kNaN;
}

void RankingMetrics::add(int64_t group, double relevance, double score) {
  if (!(relevance >= 0) || !std::isfinite(relevance))
    throw InputError(fmt::format(
        "ranking metrics: relevance {} of a row of group {} is not a finite number >= 0", relevance,
        group));
  groups_[group].push_back(Row{relevance, score});
  ++rows_;
}

void RankingMetrics::merge(const RankingMetrics& other) {
  for (const auto& [group, rows] : other.groups_) {
    auto& mine = groups_[group];
    mine.insert(mine.end(), rows.begin(), rows.end());
  }
  rows_ += other.rows_;
}

int64_t RankingMetrics::groups_without_positive() const {
  int64_t n = 0;
  for (const auto& [group, rows] : groups_)
    if (std::none_of(rows.begin(), rows.end(), [](const Row& r) { return r.relevance > 0; })) ++n;
  return n;
}

double RankingMetrics::mean(const RankingMetricSpec& spec) const {
  double sum = 0.0;
  int64_t n = 0;
  std::vector<double> rel, score;
  for (const auto& [group, rows] : groups_) {
    rel.clear();
    score.clear();
    for (const Row& r : rows) {
      rel.push_back(r.relevance);
      score.push_back(r.score);
    }
    const double v = group_value(spec, rel, score);
    if (std::isnan(v)) continue;  // no relevant row
    sum += v;
    ++n;
  }
  return n > 0 ? sum / n : kNaN;
}

nlohmann::json RankingMetrics::to_json(const std::vector<RankingMetricSpec>& extra) const {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  nlohmann::json j;
  j["groups"] = groups();
  j["groups_evaluated"] = groups_evaluated();
  j["groups_without_positive"] = groups_without_positive();
  j["rows"] = rows_;
  std::vector<RankingMetricSpec> specs = {
      {RankingMeasure::Ndcg, 1},    {RankingMeasure::Ndcg, 3},         {RankingMeasure::Ndcg, 5},
      {RankingMeasure::Ndcg, 10},   {RankingMeasure::Mrr, 10},         {RankingMeasure::Map, 0},
      {RankingMeasure::Recall, 1},  {RankingMeasure::Recall, 3},       {RankingMeasure::Recall, 5},
      {RankingMeasure::Recall, 10}, {RankingMeasure::GroupAccuracy, 0}};
  specs.insert(specs.end(), extra.begin(), extra.end());
  for (const auto& s : specs) j[s.name()] = num(mean(s));
  return j;
}

void add_ranking_metrics(nlohmann::json& eval, const RankingMetrics& m,
                         const std::string& eval_metric) {
  std::vector<RankingMetricSpec> extra;
  if (auto spec = parse_ranking_metric(eval_metric, "eval.metric")) extra.push_back(*spec);
  const nlohmann::json j = m.to_json(extra);
  for (const auto& [key, value] : j.items())
    if (key != "rows") eval[key] = value;
}

}  // namespace ftune
