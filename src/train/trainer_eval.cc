// The run loop's evaluation (see trainer_run.h): a split through evaluate(), its metrics by task
// (classification with a validation-chosen threshold for binary tasks, regression, multi-label
// with per-label thresholds, ranking metrics where the split has query groups), the log line and
// metrics.jsonl's record. The test split gets the thresholds of the selected validation
// evaluation, never its own. A causal LM's split: loss and perplexity per completion token.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "train/evaluate.h"
#include "train/ranking_metrics.h"
#include "train/trainer_run.h"

namespace ftune {

nlohmann::json Trainer::run_eval(const TokenizedSplit& split, const char* name) {
  const auto t0 = RunClock::now();
  const bool is_test = std::string(name) == "test";
  if (data_.task.causal_lm) return run_lm_eval(split, name, t0);
  const bool grouped = model_.num_labels() <= 2 &&
                       std::any_of(split.examples.begin(), split.examples.end(),
                                   [](const data::TokenizedExample& e) { return e.group >= 0; });
  RankingMetrics ranking;
  RegressionMetrics regression;
  MultiLabelMetrics multi_label(data_.labels.names);
  const ClassificationMetrics m =
      evaluate(clf(), split.examples, strategy_->eval_batch(), strategy_->eval_tokens(), pad_id_,
               loss_options_, is_test ? EvalSplit::Test : EvalSplit::Validation,
               outputs_.progress.get(), name, strategy_->eval_staging(), group_, &regression,
               &multi_label, grouped ? &ranking : nullptr);
  nlohmann::json j;
  if (data_.task.regression()) {
    j = regression.to_json();
  } else if (data_.task.multi_label) {
    // Per-label thresholds chosen on validation; the test split gets the selected evaluation's.
    if (!is_test) {
      j = multi_label.to_json_with(multi_label.best_thresholds());
    } else if (state_.best_eval.contains("at_threshold")) {
      j = multi_label.to_json_with(
          state_.best_eval["at_threshold"]["margins"].get<std::vector<double>>());
    } else {
      j = multi_label.to_json(std::vector<double>(data_.labels.names.size(), 0.0));
    }
  } else if (model_.num_labels() == 2 || data_.task.binary_score()) {
    // The decision threshold is chosen on validation data only; the test split gets the one of
    // the selected (best) validation evaluation.
    if (!is_test) {
      j = m.to_json(m.best_threshold(cfg_.eval.threshold_metric));
    } else if (state_.best_eval.contains("at_threshold")) {
      const auto& t = state_.best_eval["at_threshold"];
      j = m.to_json(BinaryThreshold{t.at("margin").get<double>(), t.at("threshold").get<double>(),
                                    t.at("chosen_by").get<std::string>(),
                                    t.at("validation_value").get<double>()});
    }
  }
  if (j.is_null()) j = m.to_json();
  if (grouped) add_ranking_metrics(j, ranking, eval_metric_);
  j["step"] = state_.step;
  j["epoch"] = epoch_of(std::max<int64_t>(state_.step - 1, 0));
  // Epochs trained at this evaluation (1.5: halfway through the second); a search's budget.
  j["epochs"] = static_cast<double>(state_.step) / static_cast<double>(steps_per_epoch_);
  j["seconds"] = seconds_since(t0);
  std::string extra;
  if (j.contains("roc_auc") && !j["roc_auc"].is_null())
    extra += fmt::format(" roc-auc {:.4f}", j["roc_auc"].get<double>());
  if (j.contains("at_threshold") && !data_.task.multi_label)
    extra += fmt::format(" | threshold {:.3f}: f1 {:.4f} accuracy {:.4f}",
                         j["at_threshold"]["threshold"].get<double>(),
                         j["at_threshold"]["f1"].get<double>(),
                         j["at_threshold"]["accuracy"].get<double>());
  if (grouped)
    extra += fmt::format(" | groups {}: ndcg@10 {:.4f} mrr@10 {:.4f} group accuracy {:.4f}",
                         ranking.groups_evaluated(), ranking.ndcg(10), ranking.mrr(10),
                         ranking.group_accuracy());
  const auto shown = [&](const char* key) {
    return j[key].is_number() ? j[key].get<double>() : std::nan("");
  };
  if (data_.task.multi_label)
    spdlog::info(
        "{} step {}: loss {:.4f} micro-F1 {:.4f} macro-F1 {:.4f} macro ROC-AUC {:.4f}{} "
        "({:.1f} s)",
        name, state_.step, shown("loss"), shown("micro_f1"), shown("macro_f1"),
        shown("macro_roc_auc"),
        j.contains("at_threshold")
            ? fmt::format(" | per-label thresholds: micro-F1 {:.4f} macro-F1 {:.4f}",
                          j["at_threshold"]["micro_f1"].get<double>(),
                          j["at_threshold"]["macro_f1"].get<double>())
            : "",
        j["seconds"].get<double>());
  else if (data_.task.regression())
    spdlog::info(
        "{} step {}: loss {:.4f} mse {:.4f} mae {:.4f} pearson {:.4f} spearman {:.4f}{} "
        "({:.1f} s)",
        name, state_.step, shown("loss"), shown("mse"), shown("mae"), shown("pearson"),
        shown("spearman"), extra, j["seconds"].get<double>());
  else
    spdlog::info("{} step {}: loss {:.4f} accuracy {:.4f} macro-F1 {:.4f}{} ({:.1f} s)", name,
                 state_.step, shown("loss"), shown("accuracy"), shown("macro_f1"), extra,
                 j["seconds"].get<double>());
  nlohmann::json line = j;
  line["split"] = name;
  log_line(line);
  window_.start = RunClock::now();  // evaluation time is not training throughput
  return j;
}

nlohmann::json Trainer::run_lm_eval(const TokenizedSplit& split, const char* name,
                                    RunClock::time_point t0) {
  const LmEval e = evaluate_lm(clf(), split.examples, strategy_->eval_batch(),
                               strategy_->eval_tokens(), pad_id_, outputs_.progress.get(), name,
                               strategy_->eval_staging(), group_);
  nlohmann::json j = {{"loss", e.loss}, {"perplexity", e.perplexity}, {"tokens", e.tokens}};
  j["step"] = state_.step;
  j["epoch"] = epoch_of(std::max<int64_t>(state_.step - 1, 0));
  j["epochs"] = static_cast<double>(state_.step) / static_cast<double>(steps_per_epoch_);
  j["seconds"] = seconds_since(t0);
  spdlog::info("{} step {}: loss {:.4f} perplexity {:.4f} over {} completion tokens ({:.1f} s)",
               name, state_.step, e.loss, e.perplexity, e.tokens, j["seconds"].get<double>());
  nlohmann::json line = j;
  line["split"] = name;
  log_line(line);
  window_.start = RunClock::now();  // evaluation time is not training throughput
  return j;
}

}  // namespace ftune
