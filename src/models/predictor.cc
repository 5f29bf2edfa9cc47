// Batched, length-sorted inference (see predictor.h).
#include "models/predictor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/memory.h"
#include "data/batcher.h"

namespace ftune {
std::vector<std::vector<int64_t>> scoring_batches(const std::vector<data::TokenizedExample>& rows,
                                                  int64_t batch_size) {
  std::vector<std::vector<int64_t>> batches;
  int64_t real = 0;
  for (const std::vector<int64_t>& sorted : data::length_sorted_batches(rows, batch_size)) {
    for (const int64_t i : sorted) {  // ascending lengths: the new row is the longest
      const int64_t len = static_cast<int64_t>(rows[i].input_ids.size());
      const int64_t n = batches.empty() ? 0 : static_cast<int64_t>(batches.back().size());
      if (n == 0 || n == batch_size ||
          static_cast<double>((n + 1) * len) > (1.0 + kPaddingSlack) * static_cast<double>(real + len)) {
        batches.emplace_back();
        real = 0;
      }
      batches.back().push_back(i);
      real += len;
    }
  }
  return batches;
}

LoadedClassifier::LoadedClassifier(std::string model_dir, Device device)
    : model_dir_(std::move(model_dir)), device_(device), spec_(load_model_spec(model_dir_)) {
  const char* env = std::getenv("FTUNE_SCORING_PRECISION");
  if (env && *env && device_.is_cpu())
    precision_ = cpu::parse_matmul_precision(env, "FTUNE_SCORING_PRECISION");
}

void LoadedClassifier::set_precision(cpu::MatmulPrecision precision) {
  if (precision != precision_) packed_.reset();
  precision_ = precision;
}

LoadedClassifier::~LoadedClassifier() = default;

void LoadedClassifier::ensure_capacity(int64_t batch, int64_t seq) {
  if (model_ && batch <= max_batch_ && seq <= max_seq_) return;
  const int64_t b = std::max(batch, max_batch_), s = std::max(seq, max_seq_);
  packed_.reset();  // packed copies of the old weights
  model_.reset();
  arena_.reset();  // the old arena goes before the new one is allocated
  ClassifierOptions options;
  options.max_batch = b;
  options.max_seq = s;
  options.training = false;
  options.device = device_;
  auto model = std::make_unique<SequenceClassifier>(spec_, options);
  ArenaPlan plan;
  model->add_to_plan(plan);
  auto arena = std::make_unique<Arena>(device_, std::move(plan));
  model->bind(*arena);
  load_model_weights(*model, model_dir_);
  model_ = std::move(model);
  arena_ = std::move(arena);
  max_batch_ = b;
  max_seq_ = s;
}

void LoadedClassifier::predict(const std::vector<data::TokenizedExample>& rows,
                               int64_t batch_size, float* out) {
  if (batch_size <= 0)
    throw InputError(fmt::format("batch size must be positive, got {}", batch_size));
  if (rows.empty()) return;
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
      validate_batch(spec_, one);
    } catch (const InputError& e) {
      std::string what = e.what();
      if (what.rfind("row 0: ", 0) == 0) what = what.substr(7);
      throw InputError(fmt::format("row {}: {}", i + 1, what));
    }
    longest = std::max<int64_t>(longest, row.input_ids.size());
  }
  const int64_t max_batch = std::min<int64_t>(batch_size, rows.size());
  ensure_capacity(max_batch, longest);
  const int64_t K = info().num_labels();
  const int32_t pad = static_cast<int32_t>(info().pad_token_id);
  HostTensor logits(DType::F32, {max_batch, K});
  if (device_.is_cpu() && !packed_) packed_ = std::make_unique<cpu::PackedWeights>(precision_);
  const cpu::FrozenWeightsScope frozen(device_.is_cpu() ? packed_.get() : nullptr);
  for (const std::vector<int64_t>& indices : scoring_batches(rows, max_batch)) {
    Batch b = data::make_batch(rows, indices, pad);
    b.labels.clear();
    model_->set_batch(b);
    model_->forward(DropoutPlan{});
    copy(logits.view().prefix({b.size, K}), model_->logits());
    for (int64_t r = 0; r < b.size; ++r)
      std::copy(logits.data<float>() + r * K, logits.data<float>() + (r + 1) * K,
                out + indices[r] * K);
  }
}

Predictions predict_logits(const std::string& model_dir,
                           const std::vector<data::TokenizedExample>& rows, int64_t batch_size,
                           Device device) {
  if (batch_size <= 0)
    throw InputError(fmt::format("batch size must be positive, got {}", batch_size));
  LoadedClassifier model(model_dir, device);
  Predictions out{model.info(), {}};
  if (rows.empty()) return out;
  const int64_t K = out.config.num_labels();
  std::vector<float> flat(rows.size() * K);
  model.predict(rows, batch_size, flat.data());
  out.logits.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    out.logits[i].assign(flat.begin() + i * K, flat.begin() + (i + 1) * K);
  return out;
}

}  // namespace ftune
