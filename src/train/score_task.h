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
//   multi_label_bce  K >= 2 labels, any number per row (a list of labels per row): one sigmoid per
//                  label, BCE over every (row, label); multi-label metrics (micro / macro F1,
//                  per-label thresholds chosen on validation); saved as problem_type
//                  "multi_label_classification"
//   auto           a checkpoint with one label (num_labels: 1 or a one-entry id2label) is a
//                  single-score model: bce, or mse when its problem_type is "regression"; a
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
  bool distill = false;      // distill_mse: the targets are data.teacher_field's scores
  bool multi_label = false;  // multi_label_bce: K labels, a list of them per row
  // Score tasks: the head's labels (the checkpoint's one name, else LABEL_0; multi-label:
  // model.labels, else a multi-label checkpoint's id2label, else empty: from the data). Empty for
  // cross_entropy (labels from the data or model.labels).
  std::vector<std::string> score_labels;
  // problem_type saved with the trained model ("" removes it; unset keeps the checkpoint's).
  std::string problem_type;
  bool set_problem_type = false;
  std::string loss_name;  // training.loss as resolved: cross_entropy, bce, mse, distill_mse

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
ScoreTask resolve_score_task(const TrainConfig& cfg, const ModelSpec& checkpoint);

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
