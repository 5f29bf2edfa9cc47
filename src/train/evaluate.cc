// Streaming evaluation (see evaluate.h).
#include "train/evaluate.h"

#include "core/memory.h"
#include "data/batcher.h"

namespace ftune {

ClassificationMetrics evaluate(SequenceClassifier& model,
                               const std::vector<data::TokenizedExample>& examples,
                               int64_t batch_size, int32_t pad_id,
                               const LossOptions& loss_options) {
  const int64_t K = model.config().num_labels();
  ClassificationMetrics metrics(K);
  HostTensor logits(DType::F32, {batch_size, K});
  for (const auto& indices : data::length_sorted_batches(examples, batch_size)) {
    const Batch b = data::make_batch(examples, indices, pad_id);
    model.set_batch(b);
    const TensorView out = model.forward(DropoutPlan{});
    const float loss = to_host_scalar(model.loss(loss_options));
    metrics.add_loss(double(loss) * b.size, b.size);
    copy(logits.view().prefix({b.size, K}), out);
    for (int64_t r = 0; r < b.size; ++r) metrics.add(logits.data<float>() + r * K, b.labels[r]);
  }
  return metrics;
}

}  // namespace ftune
