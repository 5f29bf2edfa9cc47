// Resolving training.loss and eval.metric for a run (see score_task.h).
#include "train/score_task.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ftune {

data::ScoreTargets ScoreTask::targets() const {
  if (multi_label) return data::ScoreTargets::kLabelLists;
  if (loss == LossKind::Bce) return data::ScoreTargets::kUnitScores;
  if (loss == LossKind::Mse) return data::ScoreTargets::kScores;
  return data::ScoreTargets::kLabels;
}

const std::string& ScoreTask::target_field(const TrainConfig& cfg) const {
  return distill ? cfg.data.teacher_field : cfg.data.label_field;
}

ScoreTask resolve_score_task(const TrainConfig& cfg, const ModelSpec& checkpoint,
                             bool grouped_data) {
  const auto& t = cfg.training;
  const std::string problem = checkpoint.problem_type();
  const bool one_score = checkpoint.num_labels() == 1;
  const bool keeps_one_score = one_score && cfg.model.labels.size() <= 1;
  using L = LossSetting;
  L objective = t.loss;
  if (objective == L::Auto) {
    if (keeps_one_score)
      objective = problem == "regression" ? L::Mse : grouped_data ? L::Listwise : L::Bce;
    else if (problem == "multi_label_classification")
      objective = L::MultiLabelBce;
    else
      objective = L::CrossEntropy;
  }
  ScoreTask task;
  task.objective = objective;
  task.loss_name = choice_name(objective);
  const std::string& loss = task.loss_name;
  if (objective == L::Listwise && keeps_one_score) {
    // The one-score head trains as FlagEmbedding trains it: each group's logits, softmax
    // cross-entropy with the positive as target (ops/listwise_loss.h, K = 1), on 0/1 relevance
    // read as targets in [0, 1]; saved with num_labels, id2label and problem_type as shipped.
    task.loss = LossKind::Bce;
    task.group_loss = true;
    task.score_labels = checkpoint.info().id2label;
    return task;
  }
  // listwise on a head of K labels: a softmax over each query group of class-labelled rows
  // (ops/listwise_loss.h, K = 2; the trainer refuses K > 2).
  if (objective == L::CrossEntropy || objective == L::Listwise) return task;
  if (objective == L::MultiLabelBce) {
    task.loss = LossKind::Bce;
    task.multi_label = true;
    if (t.label_smoothing > 0 || !t.class_weights.empty() || !t.class_weights_by_label.empty())
      throw InputError(fmt::format(
          "key 'training.{}' applies to cross_entropy only; training.loss {} (remove it)",
          t.label_smoothing > 0 ? "label_smoothing" : "class_weights", loss));
    if (!cfg.model.labels.empty())
      task.score_labels = cfg.model.labels;
    else if (problem == "multi_label_classification")
      task.score_labels = checkpoint.info().id2label;
    task.set_problem_type = true;
    task.problem_type = "multi_label_classification";
    return task;
  }
  task.loss = objective == L::Bce ? LossKind::Bce : LossKind::Mse;
  task.distill = objective == L::DistillMse || objective == L::MarginMse;
  task.group_loss = objective == L::MarginMse;
  const std::string why =
      t.loss == L::Auto
          ? fmt::format("training.loss auto: {} for the one-score head of {}", loss, cfg.model.path)
          : fmt::format("training.loss {}", loss);
  if (cfg.model.labels.size() > 1)
    throw InputError(
        fmt::format("key 'model.labels' lists {} labels, but {} trains one score per row; remove "
                    "model.labels, or set training.loss: cross_entropy for a classifier",
                    cfg.model.labels.size(), why));
  if (t.label_smoothing > 0)
    throw InputError(fmt::format(
        "key 'training.label_smoothing' applies to cross_entropy only; {} (set it to 0)", why));
  if (!t.class_weights.empty() || !t.class_weights_by_label.empty())
    throw InputError(fmt::format(
        "key 'training.class_weights' applies to cross_entropy only; {} (remove it)", why));
  if (!cfg.model.labels.empty())
    task.score_labels = cfg.model.labels;
  else
    task.score_labels =
        one_score ? checkpoint.info().id2label : std::vector<std::string>{"LABEL_0"};
  // Saved as transformers would train it: regression heads say so (its MSE loss); a BCE score
  // head keeps no problem_type (transformers would read one label as regression only if told).
  task.set_problem_type = true;
  task.problem_type = task.loss == LossKind::Mse ? "regression" : "";
  // margin_mse trains a reranker's score on margins: a one-score checkpoint's head and config
  // are kept as shipped (a new head is saved without a problem_type).
  if (objective == L::MarginMse) {
    task.set_problem_type = !one_score;
    task.problem_type = "";
  }
  return task;
}

bool metric_maximized(const std::string& metric) {
  return !(metric == "loss" || metric == "perplexity" || metric == "mse" || metric == "mae");
}

std::string resolve_eval_metric(const std::string& metric, const ScoreTask& task,
                                int64_t num_labels) {
  const bool regression_metric =
      metric == "pearson" || metric == "spearman" || metric == "mse" || metric == "mae";
  // Distillation matches the teacher's scores, not only their order: mse (a scale-free Pearson
  // would choose an early model whose scores correlate but sit far from the teacher's).
  if (metric == "auto") return task.distill ? "mse" : task.regression() ? "pearson" : "macro_f1";
  if (metric == "loss") return metric;
  const bool multi_label_metric =
      metric == "micro_f1" || metric == "subset_accuracy" || metric == "macro_roc_auc";
  if (task.multi_label) {
    if (!multi_label_metric && metric != "macro_f1")
      throw InputError(fmt::format(
          "key 'eval.metric': {} is not a multi-label metric; training.loss multi_label_bce "
          "computes loss, micro_f1, macro_f1, subset_accuracy and macro_roc_auc",
          metric));
    return metric;
  }
  if (multi_label_metric)
    throw InputError(fmt::format(
        "key 'eval.metric': {} is a multi-label metric (training.loss multi_label_bce)", metric));
  if (task.regression() && !regression_metric)
    throw InputError(fmt::format(
        "key 'eval.metric': {} is a classification metric; training.loss {} computes loss, "
        "pearson, spearman, mse and mae",
        metric, task.loss_name));
  if (!task.regression() && regression_metric)
    throw InputError(fmt::format(
        "key 'eval.metric': {} is a regression metric (training.loss mse or distill_mse); this "
        "task ({}) computes classification metrics",
        metric, task.loss_name));
  const bool binary = num_labels == 2 || task.binary_score();
  if ((metric == "roc_auc" || metric == "average_precision") && !binary)
    throw InputError(fmt::format(
        "key 'eval.metric': {} needs a binary task; this one has {} labels", metric, num_labels));
  return metric;
}

}  // namespace ftune
