// The fine-tuning loop: data -> tokenizer -> length-bucketed batches -> forward -> loss ->
// backward -> clip -> AdamW -> LR schedule, with evaluation, metrics.jsonl, summary.json and the
// final model saved in Hugging Face format next to its tokenizer files.
#pragma once

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace ftune {

// Runs training as configured; returns the summary also written to <output.dir>/summary.json.
nlohmann::json run_training(const TrainConfig& config);

}  // namespace ftune
