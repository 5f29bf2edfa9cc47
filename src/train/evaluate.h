// Evaluation of a model over a tokenized split: forward passes without dropout over
// length-sorted batches of batch_size rows (packed models: and at most max_tokens tokens; padded
// ones take 0) (little padding), logits streamed into ClassificationMetrics (memory
// independent of the split's size). No host wait per batch: each batch's logits and loss are read
// back asynchronously and added to the metrics one batch later (train/eval_readback.h), and with
// `staging` (the training step's InputStaging, planned for the model's batches) its inputs go
// through pinned slots on the copy stream instead of set_batch's synchronous copies. The metrics
// are the same either way: batches reach them in order, with the same values. In a data-parallel
// run every rank evaluates a contiguous share of the batches and the ranks sum their metrics
// (counts and histograms exactly; the loss sum up to float summation order), so every rank holds
// the metrics of the whole split. What is kept per row (regression's (score, target) pairs,
// multi-label's (row, label) logits and targets) is gathered exactly, in the order one process
// adds it, so rank-based metrics, per-label thresholds and F1 are one process's.
//
// Score tasks (loss_options.kind bce / mse; train/score_task.h): a one-score BCE model's metrics
// are the binary ClassificationMetrics of s = its logit against [target >= 0.5] (ROC-AUC, AP,
// thresholds chosen on validation, as for two labels); an MSE model's go to `regression` (which
// it needs), a multi-label BCE model's (K > 1) to `multi_label` (which it needs), and the returned
// ClassificationMetrics is then empty.
// With `ranking` (examples with query groups, a model of 1 or 2 labels), each row's score
// (row_score) goes into it too: every rank fills the scores of its rows into one vector over the
// split, the ranks sum it, and the groups are ranked from the whole.
#pragma once

#include <vector>

#include "data/examples.h"
#include "dist/process_group.h"
#include "models/causal_lm_scoring.h"
#include "models/sequence_classifier.h"
#include "train/input_staging.h"
#include "train/metrics.h"
#include "train/multilabel_metrics.h"
#include "train/progress.h"
#include "train/ranking_metrics.h"
#include "train/regression_metrics.h"

namespace ftune {

ClassificationMetrics evaluate(SequenceClassifier& model,
                               const std::vector<data::TokenizedExample>& examples,
                               int64_t batch_size, int64_t max_tokens, int32_t pad_id,
                               const LossOptions& loss_options,
                               EvalSplit split, ProgressBar* progress = nullptr,
                               const std::string& name = "eval", InputStaging* staging = nullptr,
                               ProcessGroup* ranks = nullptr,
                               RegressionMetrics* regression = nullptr,
                               MultiLabelMetrics* multi_label = nullptr,
                               RankingMetrics* ranking = nullptr);

// A causal LM (ModelInfo::causal_lm) over a split whose examples carry token labels: the loss
// per counted token over the whole split (each batch's mean weighed by its tokens) and its
// perplexity, as models/causal_lm_scoring.h's evaluate_causal_lm, through the training step's
// staging when given; data-parallel, each rank its share of the batches, the sums added.
LmEval evaluate_lm(SequenceClassifier& model, const std::vector<data::TokenizedExample>& examples,
                   int64_t batch_size, int64_t max_tokens, int32_t pad_id,
                   ProgressBar* progress = nullptr, const std::string& name = "eval",
                   InputStaging* staging = nullptr, ProcessGroup* ranks = nullptr);

}  // namespace ftune
