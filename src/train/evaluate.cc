// Streaming evaluation (see evaluate.h).
#include "train/evaluate.h"

#include <cmath>
#include <deque>

#include "core/memory.h"
#include "data/batcher.h"
#include "models/batch.h"
#include "train/eval_readback.h"

namespace ftune {
namespace {

// Every rank's records of `width` floats (this rank's in `local`), in rank order on every rank:
// the ranks' record counts summed first, then each rank's records written at its offset of a
// zeroed vector of all of them and the vectors summed (a value plus zeros is the value, so the
// gathered values are exact).
std::vector<float> gather_in_rank_order(ProcessGroup& ranks, const std::vector<float>& local,
                                        int64_t width) {
  std::vector<int64_t> counts(ranks.size(), 0);
  counts[ranks.rank()] = static_cast<int64_t>(local.size()) / width;
  ranks.sum(counts.data(), static_cast<int64_t>(counts.size()));
  int64_t offset = 0, total = 0;
  for (int64_t r = 0; r < ranks.size(); ++r) {
    if (r < ranks.rank()) offset += counts[r];
    total += counts[r];
  }
  std::vector<float> all(static_cast<size_t>(total * width), 0.0f);
  std::copy(local.begin(), local.end(), all.begin() + offset * width);
  ranks.sum(all.data(), static_cast<int64_t>(all.size()));
  return all;
}

// A regression evaluation's (prediction, target) pairs and loss over every rank.
void gather_regression(ProcessGroup& ranks, RegressionMetrics& regression) {
  std::vector<float> pairs;
  for (int64_t i = 0; i < regression.count(); ++i) {
    pairs.push_back(regression.predictions()[i]);
    pairs.push_back(regression.targets()[i]);
  }
  pairs = gather_in_rank_order(ranks, pairs, 2);
  double loss[2] = {regression.loss_sum(), double(regression.loss_rows())};
  ranks.sum(loss, 2);
  RegressionMetrics all;
  for (size_t i = 0; i < pairs.size(); i += 2) all.add(pairs[i], pairs[i + 1]);
  all.add_loss(loss[0], static_cast<int64_t>(loss[1]));
  regression = std::move(all);
}

// A multi-label evaluation's (row, label) logits and 0/1 targets and loss over every rank, the
// rows in the order one process adds them (rank r holds the r-th contiguous share of the
// batches), so the per-label thresholds, micro / macro F1 and ROC-AUC are one process's.
void gather_multi_label(ProcessGroup& ranks, MultiLabelMetrics& multi_label) {
  const int64_t K = multi_label.num_labels();
  std::vector<float> rows;  // per row: its K logits, then its K targets (0 or 1)
  for (int64_t r = 0; r < multi_label.count(); ++r) {
    for (int64_t c = 0; c < K; ++c) rows.push_back(multi_label.scores()[r * K + c]);
    for (int64_t c = 0; c < K; ++c) rows.push_back(float(multi_label.truth()[r * K + c]));
  }
  rows = gather_in_rank_order(ranks, rows, 2 * K);
  double loss[2] = {multi_label.loss_sum(), double(multi_label.loss_rows())};
  ranks.sum(loss, 2);
  MultiLabelMetrics all(multi_label.labels());
  for (size_t at = 0; at < rows.size(); at += static_cast<size_t>(2 * K))
    all.add(rows.data() + at, rows.data() + at + K);
  all.add_loss(loss[0], static_cast<int64_t>(loss[1]));
  multi_label = std::move(all);
}

// The evaluation batches of `examples` this rank runs: length-sorted, packed up to the run's
// token budget where the model packs (cut as the memory plan cut them,
// train/run_micro_batches.h), and with several ranks this rank's contiguous share.
std::vector<std::vector<int64_t>> rank_batches(const SequenceClassifier& model,
                                               const std::vector<data::TokenizedExample>& examples,
                                               int64_t batch_size, int64_t max_tokens,
                                               ProcessGroup* ranks) {
  const ClassifierOptions& o = model.options();
  FTUNE_ASSERT(!o.packed || max_tokens > 0, "packed evaluation without a token budget");
  auto batches = data::length_sorted_batches(examples, batch_size, o.packed ? max_tokens : 0);
  if (ranks && ranks->distributed()) {
    const auto n = static_cast<int64_t>(batches.size());
    batches = decltype(batches)(batches.begin() + n * ranks->rank() / ranks->size(),
                                batches.begin() + n * (ranks->rank() + 1) / ranks->size());
  }
  return batches;
}

// Hands batch `b` to the model: through the training step's staging (pinned host slots copied on
// the copy stream, no host wait) where there is one, else as host data.
void load_batch(SequenceClassifier& model, const Batch& b, InputStaging* staging) {
  if (!staging) {
    model.set_batch(b);
    return;
  }
  validate_batch(model.spec(), b);
  const StagedInputs in =
      staging->acquire(staging->stage(b, position_ids(model.spec(), b), 0, b.size));
  model.use_inputs(in.inputs, in.labels, in.targets);
}

}  // namespace

ClassificationMetrics evaluate(SequenceClassifier& model,
                               const std::vector<data::TokenizedExample>& examples,
                               int64_t batch_size, int64_t max_tokens, int32_t pad_id,
                               const LossOptions& loss_options,
                               EvalSplit split, ProgressBar* progress, const std::string& name,
                               InputStaging* staging, ProcessGroup* ranks,
                               RegressionMetrics* regression, MultiLabelMetrics* multi_label,
                               RankingMetrics* ranking) {
  const int64_t K = model.config().num_labels();
  const bool scores = loss_options.kind != LossKind::CrossEntropy;
  FTUNE_ASSERT(!scores || K == 1 || (loss_options.kind == LossKind::Bce && multi_label),
               "score evaluation of {} scores per row needs multi-label metrics", K);
  if (K == 1 || loss_options.kind != LossKind::Bce) multi_label = nullptr;
  FTUNE_ASSERT(loss_options.kind != LossKind::Mse || regression != nullptr,
               "regression evaluation without RegressionMetrics");
  if (loss_options.kind != LossKind::Mse) regression = nullptr;
  // A one-score BCE model: binary metrics on s = its logit (eval_readback.h).
  ClassificationMetrics metrics(scores ? 2 : K, split);
  // Evaluation batches are sorted by length, not laid out in groups: their loss is the pointwise
  // cross-entropy even in a listwise run (the ranking metrics rank the groups).
  LossOptions pointwise = loss_options;
  pointwise.listwise_group_size = 0;
  const ClassifierOptions& o = model.options();
  const auto batches = rank_batches(model, examples, batch_size, max_tokens, ranks);
  const bool sharded = ranks && ranks->distributed();
  if (progress) progress->begin_eval(name, static_cast<int64_t>(batches.size()));
  EvalReadback readback(model.device(), std::max(batch_size, o.max_batch), K);
  int64_t done = 0, rows = 0;
  // Ranking: each row's score by example index (0 for other ranks' rows, summed below).
  if (ranking && K > 2) ranking = nullptr;
  std::vector<double> row_scores(ranking ? examples.size() : 0, 0.0);
  std::deque<const std::vector<int64_t>*> pending_indices;
  const auto score_rows = [&](const float* logits, int64_t n) {
    const std::vector<int64_t>& idx = *pending_indices.front();
    for (int64_t r = 0; r < n; ++r) row_scores[idx[r]] = row_score(logits + r * K, K);
  };
  const auto add_oldest = [&] {
    rows += readback.pop(metrics, regression, multi_label,
                         ranking ? score_rows : std::function<void(const float*, int64_t)>());
    pending_indices.pop_front();
    if (progress) progress->update_eval(++done, rows);
  };
  for (const auto& indices : batches) {
    const Batch b = data::make_batch(examples, indices, pad_id);
    load_batch(model, b, staging);
    const TensorView out = model.forward(DropoutPlan{});
    const TensorView loss = model.loss(pointwise);
    if (readback.pending() == EvalReadback::kSlots) add_oldest();
    readback.push(out, loss, b.labels, b.targets);
    pending_indices.push_back(&indices);
  }
  while (readback.pending() > 0) add_oldest();
  if (progress) progress->end_eval();
  if (sharded && regression) gather_regression(*ranks, *regression);
  if (sharded && multi_label) gather_multi_label(*ranks, *multi_label);
  if (sharded) {
    std::vector<int64_t> counts = metrics.counts();
    double loss_sum = metrics.loss_sum();
    ranks->sum(counts.data(), static_cast<int64_t>(counts.size()));
    ranks->sum(&loss_sum, 1);
    metrics.set_counts(counts, loss_sum);
    if (ranking) ranks->sum(row_scores.data(), static_cast<int64_t>(row_scores.size()));
  }
  if (ranking)
    for (size_t i = 0; i < examples.size(); ++i)
      if (examples[i].group >= 0) ranking->add(examples[i].group, examples[i].relevance, row_scores[i]);
  return metrics;
}

LmEval evaluate_lm(SequenceClassifier& model, const std::vector<data::TokenizedExample>& examples,
                   int64_t batch_size, int64_t max_tokens, int32_t pad_id, ProgressBar* progress,
                   const std::string& name, InputStaging* staging, ProcessGroup* ranks) {
  const auto batches = rank_batches(model, examples, batch_size, max_tokens, ranks);
  const bool sharded = ranks && ranks->distributed();
  if (progress) progress->begin_eval(name, static_cast<int64_t>(batches.size()));
  // [summed negative log-likelihood, tokens counted]
  double sums[2] = {0.0, 0.0};
  int64_t done = 0, rows = 0;
  HostTensor loss(DType::F32, Shape{1});
  for (const auto& indices : batches) {
    const Batch b = data::make_batch(examples, indices, pad_id);
    load_batch(model, b, staging);
    model.forward(DropoutPlan{});
    copy(loss.view(), model.loss(LossOptions{}));  // the batch's mean over its counted tokens
    const int64_t n = model.lm_counted_tokens();
    if (n > 0) sums[0] += double(loss.data<float>()[0]) * double(n);
    sums[1] += double(n);
    rows += b.size;
    if (progress) progress->update_eval(++done, rows);
  }
  if (progress) progress->end_eval();
  if (sharded) ranks->sum(sums, 2);
  LmEval e;
  e.tokens = static_cast<int64_t>(sums[1]);
  e.loss = e.tokens > 0 ? sums[0] / sums[1] : std::nan("");
  e.perplexity = std::exp(e.loss);
  return e;
}

}  // namespace ftune
