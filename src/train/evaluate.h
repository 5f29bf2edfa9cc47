// Evaluation of a model over a tokenized split: forward passes without dropout over
// length-sorted batches (little padding), logits streamed into ClassificationMetrics (memory
// independent of the split's size).
#pragma once

#include <vector>

#include "data/examples.h"
#include "models/sequence_classifier.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace ftune {

ClassificationMetrics evaluate(SequenceClassifier& model,
                               const std::vector<data::TokenizedExample>& examples,
                               int64_t batch_size, int32_t pad_id, const LossOptions& loss_options,
                               EvalSplit split, ProgressBar* progress = nullptr,
                               const std::string& name = "eval");

}  // namespace ftune
