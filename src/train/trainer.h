// The fine-tuning run: data -> tokenizer -> length-bucketed micro-batches -> forward -> loss ->
// backward (gradients accumulate over micro-batches) -> clip -> AdamW (layer-wise LR decay) ->
// schedule, with evaluation, early stopping, atomic checkpoints that resume bit-exactly,
// SIGTERM handling, metrics.jsonl / TensorBoard / summary.json, and the selected model saved in
// Hugging Face format next to its tokenizer files.
//
// Run directory (output.dir):
//   config.yaml        the resolved configuration
//   metrics.jsonl      train lines every log_every steps, validation / test lines
//   summary.json       best and final metrics, throughput, input wait, memory, status
//   checkpoints/       step-NNNNNNN/ (HF model + trainer_state.json + optimizer.safetensors)
//   model/             the selected model (best on validation, else the last), HF format
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace ftune {

struct TrainOptions {
  bool resume = false;  // continue from the last checkpoint in output.dir
  // Called after each evaluation with the step and the validation metrics; returning true stops
  // the run (a hyperparameter-search trial being pruned). The summary says "stopped_by": "hook".
  std::function<bool(int64_t step, const nlohmann::json& eval)> on_eval;
  // Called with each line the run writes to metrics.jsonl, as it is written (a training interval
  // every training.log_every steps, each evaluation), on the lead rank: progress for a caller
  // that has no terminal (the Python package).
  std::function<void(const nlohmann::json& line)> on_log;
  // Polled at each optimizer-step boundary; true stops the run as a signal would (checkpoint
  // saved, Interrupted thrown with signal 0): a hyperparameter-search trial past its time.
  std::function<bool()> stop_requested;
};

// Runs training as configured; returns the summary also written to <output.dir>/summary.json.
// Throws Interrupted (after saving a checkpoint) when SIGTERM or SIGINT arrives.
nlohmann::json run_training(const TrainConfig& config, const TrainOptions& options = {});

}  // namespace ftune
