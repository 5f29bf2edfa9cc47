// What a run trains, from training.loss and the checkpoint's head (docs/rerankers.md;
// DESIGN principle 11: a task is a head, a loss and its metrics):
//   cross_entropy  K >= 2 class labels from the data (or model.labels): softmax cross-entropy,
//                  classification metrics
//   bce            one score (K = 1) on 0/1 relevance or soft targets in [0, 1]: binary
//                  cross-entropy with logits (sentence-transformers' CrossEncoder default, how
//                  BGE rerankers are fine-tuned pointwise); binary metrics on s = the logit
//   mse            one score on any float target (STS-B-style regression): mean squared error;
//                  regression metrics (MSE, MAE, Pearson, Spearman); saved as problem_type
//                  "regression"
//   distill_mse    one score against a teacher's score (data.teacher_field): MSE; regression
//                  metrics against the teacher's scores
//   margin_mse     one score, query groups (data.group_field or FlagEmbedding's format), each
//                  row's teacher score in data.teacher_field: MarginMSE between the student's
//                  s_pos - s_neg and the teacher's t_pos - t_neg (ops/margin_mse_loss.h, as
//                  sentence-transformers' cross-encoder MarginMSELoss); a group's positive is its
//                  row with the highest teacher score; evaluated as distill_mse (regression
//                  metrics against the teacher) plus ranking metrics (relevant: the teacher's top)
//   listwise       query groups of 1 positive + negatives, softmax cross-entropy over each group
//                  (ops/listwise_loss.h): on a one-score checkpoint (num_labels 1, the BGE
//                  reranker and ms-marco cross-encoder case) the single logit trains as
//                  FlagEmbedding trains it, on 0/1 relevance read as targets in [0, 1], the head
//                  and config kept as shipped, evaluated with ranking metrics plus bce's binary
//                  metrics on the logit; otherwise on a 2-label classifier head (class labels,
//                  score logit 1 - logit 0; K > 2 is refused)
//   multi_label_bce  K >= 2 labels, any number per row (a list of labels per row): one sigmoid per
//                  label, BCE over every (row, label); multi-label metrics (micro / macro F1,
//                  per-label thresholds chosen on validation); saved as problem_type
//                  "multi_label_classification"
//   auto           a checkpoint with one label (num_labels: 1 or a one-entry id2label) is a
//                  single-score model: mse when its problem_type is "regression", else listwise
//                  when the training data has query groups (data.group_field, or FlagEmbedding's
//                  nested JSONL), else bce; a
//                  checkpoint whose problem_type is "multi_label_classification" is
//                  multi_label_bce; any other checkpoint (a head of K >= 2 labels, or none: a base
//                  encoder) is cross_entropy
// A checkpoint's one-score head is kept as shipped; a new head is made only when the task has
// another number of labels (a score loss on a K >= 2 head, cross_entropy on a one-score head), and
// the run says so. label_smoothing and class_weights apply to cross_entropy only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "models/backbone.h"
#include "models/sequence_classifier.h"
#include "train/train_config.h"

namespace ftune {

struct ScoreTask {
  LossKind loss = LossKind::CrossEntropy;
  bool distill = false;      // distill_mse, margin_mse: the targets are data.teacher_field's
  // A loss over query groups on one score: listwise (loss Bce: relevance targets) or margin_mse
  // (loss Mse: teacher scores). listwise on a 2-label head is loss CrossEntropy, loss_name listwise.
  bool group_loss = false;
  bool multi_label = false;  // multi_label_bce: K labels, a list of them per row
  // model.task causal_lm: next-token cross-entropy on the completion tokens through the LM head
  // (models/causal_lm_loss.h); no labels, evaluated by loss and perplexity per token.
  bool causal_lm = false;
  // Score tasks: the head's labels (the checkpoint's one name, else LABEL_0; multi-label:
  // model.labels, else a multi-label checkpoint's id2label, else empty: from the data). Empty for
  // cross_entropy (labels from the data or model.labels).
  std::vector<std::string> score_labels;
  // problem_type saved with the trained model ("" removes it; unset keeps the checkpoint's).
  std::string problem_type;
  bool set_problem_type = false;
  // training.loss as resolved (never Auto), and its word for messages: cross_entropy, bce, ...
  LossSetting objective = LossSetting::CrossEntropy;
  std::string loss_name;
  // Whether the run trains on query groups (group_sampler.h): listwise (either head), margin_mse.
  bool grouped() const {
    return objective == LossSetting::Listwise || objective == LossSetting::MarginMse;
  }

  bool scores() const { return loss != LossKind::CrossEntropy; }
  bool regression() const { return loss == LossKind::Mse; }
  bool binary_score() const { return loss == LossKind::Bce && !multi_label; }
  // How the data reader reads the label (or teacher) column.
  data::ScoreTargets targets() const;
  // The column the targets are read from: data.teacher_field (distill_mse) or data.label_field.
  const std::string& target_field(const TrainConfig& cfg) const;
};

// Resolves training.loss against the checkpoint in model.path (`checkpoint`: its spec as loaded,
// with its own labels). InputError naming the key for a combination that cannot train:
// label_smoothing or class_weights with a score loss, a score loss with several model.labels.
// `grouped_data`: the training data has query groups (training.loss auto on a one-score
// checkpoint is then listwise).
ScoreTask resolve_score_task(const TrainConfig& cfg, const ModelSpec& checkpoint,
                             bool grouped_data = false);

// Whether a larger value of eval.metric `metric` is better: false for loss, mse and mae (the
// metrics a run minimises), true for the others.
bool metric_maximized(const std::string& metric);
// eval.metric auto for a task: macro_f1 (classification, one-score BCE and multi-label
// included), pearson for regression, mse for distillation. InputError naming eval.metric for a
// metric the task does not compute (a regression metric on a classifier, roc_auc on more than 2
// classes, ...).
std::string resolve_eval_metric(const std::string& metric, const ScoreTask& task,
                                int64_t num_labels);

}  // namespace ftune
