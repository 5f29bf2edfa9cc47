// The training config's closed choices that have no enum below train/: each an enum with its
// words (core/choice.h), declared once here; the key table (train/config_keys.cc) parses and
// validates them when the YAML is read, and the code that uses them switches on the enum.
// (data.format and data.bad_rows: data/data_choices.h; training.schedule: optim/lr_schedule.h;
// training.tf32, training.cuda_graphs and data.packing are a core Switch: auto, on or off.)
#pragma once

#include "core/choice.h"

namespace ftune {

// model.task: what the run trains: a classifier (or scorer) on labelled rows, or a causal language
// model on prompt -> completion rows (docs/causal-lm.md; data/completions.h).
enum class ModelTask { Classification, CausalLm };
constexpr ChoiceNames<ModelTask, 2> kModelTaskNames{
    {{ModelTask::Classification, "classification"}, {ModelTask::CausalLm, "causal_lm"}}};
constexpr const auto& choice_names(ModelTask) {
  return kModelTaskNames;
}

// training.precision: auto (bf16 on a GPU with bf16, fp16 on an older one, fp32 on the CPU) or
// the precision itself (train/precision.h).
enum class PrecisionSetting { Auto, FP32, BF16, FP16 };
constexpr ChoiceNames<PrecisionSetting, 4> kPrecisionSettingNames{
    {{PrecisionSetting::Auto, "auto"},
     {PrecisionSetting::FP32, "fp32"},
     {PrecisionSetting::BF16, "bf16"},
     {PrecisionSetting::FP16, "fp16"}}};
constexpr const auto& choice_names(PrecisionSetting) {
  return kPrecisionSettingNames;
}

// training.attention: the kernel of 16-bit attention on a GPU (train/precision.h).
enum class AttentionSetting { Auto, Ftune, Cudnn };
constexpr ChoiceNames<AttentionSetting, 3> kAttentionSettingNames{
    {{AttentionSetting::Auto, "auto"},
     {AttentionSetting::Ftune, "ftune"},
     {AttentionSetting::Cudnn, "cudnn"}}};
constexpr const auto& choice_names(AttentionSetting) {
  return kAttentionSettingNames;
}

// training.loss: what the head trains on (train/score_task.h resolves auto).
enum class LossSetting {
  Auto,
  CrossEntropy,
  Bce,
  Mse,
  DistillMse,
  MultiLabelBce,
  Listwise,
  MarginMse
};
constexpr ChoiceNames<LossSetting, 8> kLossSettingNames{
    {{LossSetting::Auto, "auto"},
     {LossSetting::CrossEntropy, "cross_entropy"},
     {LossSetting::Bce, "bce"},
     {LossSetting::Mse, "mse"},
     {LossSetting::DistillMse, "distill_mse"},
     {LossSetting::MultiLabelBce, "multi_label_bce"},
     {LossSetting::Listwise, "listwise"},
     {LossSetting::MarginMse, "margin_mse"}}};
constexpr const auto& choice_names(LossSetting) {
  return kLossSettingNames;
}

// training.plan_lengths: what the memory plan is made for (train/batch_plan.h).
enum class PlanLengths { Data, MaxLength };
constexpr ChoiceNames<PlanLengths, 2> kPlanLengthsNames{
    {{PlanLengths::Data, "data"}, {PlanLengths::MaxLength, "max_length"}}};
constexpr const auto& choice_names(PlanLengths) {
  return kPlanLengthsNames;
}

// data.groups_without_positive: a query group with no relevant row is counted with a warning, or
// refused.
enum class GroupsWithoutPositive { Warn, Fail };
constexpr ChoiceNames<GroupsWithoutPositive, 2> kGroupsWithoutPositiveNames{
    {{GroupsWithoutPositive::Warn, "warn"}, {GroupsWithoutPositive::Fail, "fail"}}};
constexpr const auto& choice_names(GroupsWithoutPositive) {
  return kGroupsWithoutPositiveNames;
}

// eval.mode: whether eval.metric is better higher or lower; auto by the metric.
enum class MetricMode { Auto, Max, Min };
constexpr ChoiceNames<MetricMode, 3> kMetricModeNames{
    {{MetricMode::Auto, "auto"}, {MetricMode::Max, "max"}, {MetricMode::Min, "min"}}};
constexpr const auto& choice_names(MetricMode) {
  return kMetricModeNames;
}

// eval.threshold_metric: what a binary task's decision threshold, chosen on validation,
// maximises (train/metrics.h).
enum class ThresholdMetric { F1, Mcc, Accuracy };
constexpr ChoiceNames<ThresholdMetric, 3> kThresholdMetricNames{
    {{ThresholdMetric::F1, "f1"},
     {ThresholdMetric::Mcc, "mcc"},
     {ThresholdMetric::Accuracy, "accuracy"}}};
constexpr const auto& choice_names(ThresholdMetric) {
  return kThresholdMetricNames;
}

// output.progress: a bar on a terminal (auto), a bar, or plain lines (train/progress.h).
enum class ProgressStyle { Auto, Bar, Plain };
constexpr ChoiceNames<ProgressStyle, 3> kProgressStyleNames{
    {{ProgressStyle::Auto, "auto"}, {ProgressStyle::Bar, "bar"}, {ProgressStyle::Plain, "plain"}}};
constexpr const auto& choice_names(ProgressStyle) {
  return kProgressStyleNames;
}

}  // namespace ftune
