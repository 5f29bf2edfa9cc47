// Streaming evaluation (see evaluate.h).
#include "train/evaluate.h"

#include "core/memory.h"
#include "data/batcher.h"

namespace ftune {

ClassificationMetrics evaluate(SequenceClassifier& model,
                               const std::vector<data::TokenizedExample>& examples,
                               int64_t batch_size, int32_t pad_id, const LossOptions& loss_options,
                               EvalSplit split, ProgressBar* progress, const std::string& name,
                               ProcessGroup* ranks) {
  const int64_t K = model.config().num_labels();
  ClassificationMetrics metrics(K, split);
  HostTensor logits(DType::F32, {std::max(batch_size, model.options().max_batch), K});
  // Packed: batches filled to the model's token budget (at most its rows).
  const ClassifierOptions& o = model.options();
  auto batches = o.packed ? data::length_sorted_batches(examples, o.max_batch, o.max_tokens)
                          : data::length_sorted_batches(examples, batch_size);
  const bool sharded = ranks && ranks->distributed();
  if (sharded) {  // this rank's contiguous share of the batches
    const auto n = static_cast<int64_t>(batches.size());
    const int64_t begin = n * ranks->rank() / ranks->size(),
                  end = n * (ranks->rank() + 1) / ranks->size();
    batches = decltype(batches)(batches.begin() + begin, batches.begin() + end);
  }
  if (progress) progress->begin_eval(name, static_cast<int64_t>(batches.size()));
  int64_t done = 0, rows = 0;
  for (const auto& indices : batches) {
    const Batch b = data::make_batch(examples, indices, pad_id);
    model.set_batch(b);
    const TensorView out = model.forward(DropoutPlan{});
    const float loss = to_host_scalar(model.loss(loss_options));
    metrics.add_loss(double(loss) * b.size, b.size);
    copy(logits.view().prefix({b.size, K}), out);
    metrics.add_batch(logits.data<float>(), b.labels.data(), b.size);
    rows += b.size;
    if (progress) progress->update_eval(++done, rows);
  }
  if (progress) progress->end_eval();
  if (sharded) {
    std::vector<int64_t> counts = metrics.counts();
    double loss_sum = metrics.loss_sum();
    ranks->sum(counts.data(), static_cast<int64_t>(counts.size()));
    ranks->sum(&loss_sum, 1);
    metrics.set_counts(counts, loss_sum);
  }
  return metrics;
}

}  // namespace ftune
