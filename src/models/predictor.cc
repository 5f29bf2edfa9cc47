// Batched, length-sorted inference (see predictor.h).
#include "models/predictor.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/memory.h"
#include "data/batcher.h"
#include "models/hf_checkpoint.h"

namespace ftune {

Predictions predict_logits(const std::string& model_dir,
                           const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                           Device device) {
  if (batch_size <= 0)
    throw InputError(fmt::format("batch size must be positive, got {}", batch_size));
  const ModelSpec spec = load_model_spec(model_dir);
  Predictions out{spec.info(), {}};
  if (rows.empty()) return out;
  int64_t longest = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const data::TokenizedExample& row = rows[i];
    if (row.input_ids.empty()) throw InputError(fmt::format("row {}: no tokens", i + 1));
    if (!row.token_type_ids.empty() && row.token_type_ids.size() != row.input_ids.size())
      throw InputError(fmt::format("row {}: {} token_type_ids for {} input_ids", i + 1,
                                   row.token_type_ids.size(), row.input_ids.size()));
    Batch one{1,
              static_cast<int64_t>(row.input_ids.size()),
              row.input_ids,
              row.token_type_ids,
              std::vector<int32_t>(row.input_ids.size(), 1),
              {}};
    try {
      validate_batch(spec, one);
    } catch (const InputError& e) {
      std::string what = e.what();
      if (what.rfind("row 0: ", 0) == 0) what = what.substr(7);
      throw InputError(fmt::format("row {}: {}", i + 1, what));
    }
    longest = std::max<int64_t>(longest, row.input_ids.size());
  }
  const int64_t max_batch = std::min<int64_t>(batch_size, rows.size());
  ClassifierOptions options;
  options.max_batch = max_batch;
  options.max_seq = longest;
  options.training = false;
  options.device = device;
  SequenceClassifier model(spec, options);
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(device, std::move(plan));
  model.bind(arena);
  load_model_weights(model, model_dir);

  out.logits.resize(rows.size());
  const int64_t K = out.config.num_labels();
  const int32_t pad = static_cast<int32_t>(out.config.pad_token_id);
  HostTensor logits(DType::F32, {max_batch, K});
  for (const std::vector<int64_t>& indices : data::length_sorted_batches(rows, max_batch)) {
    Batch b = data::make_batch(rows, indices, pad);
    b.labels.clear();
    model.set_batch(b);
    model.forward(DropoutPlan{});
    copy(logits.view().prefix({b.size, K}), model.logits());
    for (int64_t r = 0; r < b.size; ++r)
      out.logits[indices[r]].assign(logits.data<float>() + r * K,
                                    logits.data<float>() + (r + 1) * K);
  }
  return out;
}

}  // namespace ftune
