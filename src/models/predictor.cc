// Batched, length-sorted inference (see predictor.h).
#include "models/predictor.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/memory.h"
#include "models/hf_checkpoint.h"

namespace ftune {

Predictions predict_logits(const std::string& model_dir, const std::vector<TokenRow>& rows, int64_t batch_size,
                           Device device) {
  if (batch_size <= 0) throw InputError(fmt::format("batch size must be positive, got {}", batch_size));
  Predictions out{load_model_config(model_dir), {}};
  if (rows.empty()) return out;
  int64_t longest = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const TokenRow& row = rows[i];
    if (row.input_ids.empty()) throw InputError(fmt::format("row {}: no tokens", i + 1));
    if (!row.token_type_ids.empty() && row.token_type_ids.size() != row.input_ids.size())
      throw InputError(fmt::format("row {}: {} token_type_ids for {} input_ids", i + 1, row.token_type_ids.size(),
                                   row.input_ids.size()));
    Batch one{1, static_cast<int64_t>(row.input_ids.size()), row.input_ids, row.token_type_ids,
              std::vector<int32_t>(row.input_ids.size(), 1), {}};
    try {
      validate_batch(out.config, one);
    } catch (const InputError& e) {
      std::string what = e.what();
      if (what.rfind("row 0: ", 0) == 0) what = what.substr(7);
      throw InputError(fmt::format("row {}: {}", i + 1, what));
    }
    longest = std::max<int64_t>(longest, row.input_ids.size());
  }
  const int64_t max_batch = std::min<int64_t>(batch_size, rows.size());
  SequenceClassifier model(out.config, {max_batch, longest, /*training=*/false});
  ArenaPlan plan;
  model.add_to_plan(plan);
  Arena arena(device, std::move(plan));
  model.bind(arena);
  load_model_weights(model, model_dir);

  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rows[a].input_ids.size() < rows[b].input_ids.size(); });
  out.logits.resize(rows.size());
  const int64_t K = out.config.num_labels();
  const int32_t pad = static_cast<int32_t>(out.config.pad_token_id);
  for (size_t start = 0; start < order.size(); start += max_batch) {
    const size_t end = std::min(order.size(), start + max_batch);
    Batch b;
    b.size = static_cast<int64_t>(end - start);
    b.seq_len = static_cast<int64_t>(rows[order[end - 1]].input_ids.size());
    b.input_ids.assign(b.size * b.seq_len, pad);
    b.token_type_ids.assign(b.size * b.seq_len, 0);
    b.attention_mask.assign(b.size * b.seq_len, 0);
    for (int64_t r = 0; r < b.size; ++r) {
      const TokenRow& row = rows[order[start + r]];
      for (size_t t = 0; t < row.input_ids.size(); ++t) {
        b.input_ids[r * b.seq_len + t] = row.input_ids[t];
        b.attention_mask[r * b.seq_len + t] = 1;
        if (!row.token_type_ids.empty()) b.token_type_ids[r * b.seq_len + t] = row.token_type_ids[t];
      }
    }
    model.set_batch(b);
    model.forward(DropoutPlan{});
    HostTensor logits(DType::F32, {b.size, K});
    copy(logits.view(), model.logits());
    for (int64_t r = 0; r < b.size; ++r)
      out.logits[order[start + r]].assign(logits.data<float>() + r * K, logits.data<float>() + (r + 1) * K);
  }
  return out;
}

}  // namespace ftune
