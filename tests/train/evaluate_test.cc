// Evaluation without a host wait per batch (train/evaluate.h, train/eval_readback.h): the merged
// metrics (loss, confusion, AUC, ...) are identical to those of the synchronous loop evaluate()
// ran before (each batch's loss read with to_host_scalar and its logits copied before the next
// batch), padded and packed, with the model's own inputs and through the step's input staging;
// and evaluation reads nothing back with to_host_scalar.
#include <gtest/gtest.h>

#include <random>

#include "core/arena.h"
#include "core/memory.h"
#include "data/batcher.h"
#include "models/hf_checkpoint.h"
#include "models/param_init.h"
#include "train/evaluate.h"
#include "train/input_staging.h"

namespace ftune::test {
namespace {

nlohmann::json tiny_bert_config() {
  return {{"model_type", "bert"},       {"vocab_size", 200},
          {"hidden_size", 32},          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},   {"intermediate_size", 64},
          {"max_position_embeddings", 64}, {"type_vocab_size", 2},
          {"hidden_act", "gelu"},       {"num_labels", 3},
          {"pad_token_id", 0}};
}

// 37 rows of 2 to 22 tokens, labels 0-2 and one ignored (-100) row.
std::vector<data::TokenizedExample> random_rows() {
  std::mt19937 rng(11);
  std::vector<data::TokenizedExample> rows(37);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int len = 2 + static_cast<int>(rng() % 21);
    rows[i].input_ids.push_back(101);
    for (int t = 1; t < len; ++t) rows[i].input_ids.push_back(5 + static_cast<int32_t>(rng() % 190));
    rows[i].token_type_ids.assign(rows[i].input_ids.size(), 0);
    for (int t = len / 2; t < len; ++t) rows[i].token_type_ids[static_cast<size_t>(t)] = 1;
    rows[i].label = i == 7 ? -100 : static_cast<int32_t>(rng() % 3);
  }
  return rows;
}

// What evaluate() computed before it read back asynchronously: one synchronous read per batch.
ClassificationMetrics synchronous_evaluation(SequenceClassifier& model,
                                             const std::vector<data::TokenizedExample>& rows,
                                             int64_t batch_size) {
  const int64_t K = model.config().num_labels();
  ClassificationMetrics metrics(K, EvalSplit::Validation);
  HostTensor logits(DType::F32, {model.options().max_batch, K});
  const ClassifierOptions& o = model.options();
  const auto batches = o.packed ? data::length_sorted_batches(rows, o.max_batch, o.max_tokens)
                                : data::length_sorted_batches(rows, batch_size);
  for (const auto& indices : batches) {
    const Batch b = data::make_batch(rows, indices, 0);
    model.set_batch(b);
    const TensorView out = model.forward(DropoutPlan{});
    const float loss = to_host_scalar(model.loss({}));
    metrics.add_loss(double(loss) * b.size, b.size);
    copy(logits.view().prefix({b.size, K}), out);
    metrics.add_batch(logits.data<float>(), b.labels.data(), b.size);
  }
  return metrics;
}

class EvaluateTest : public ::testing::TestWithParam<bool> {};  // packed?

TEST_P(EvaluateTest, AsynchronousReadBackMergesTheSameMetrics) {
  const bool packed = GetParam();
  ClassifierOptions options;
  options.max_batch = 8;
  options.max_seq = 24;
  options.training = false;
  options.packed = packed;
  options.max_tokens = packed ? 64 : 0;
  SequenceClassifier model(model_spec_from_json(tiny_bert_config(), "tiny"), options);
  InputStaging staging(options.max_batch, options.max_seq, PadRule{}, options.max_tokens);
  ArenaPlan plan;
  model.add_to_plan(plan);
  staging.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  model.bind(arena);
  staging.bind(arena);
  init_all_params_like_hf(model, 5);
  const auto rows = random_rows();

  const ClassificationMetrics expected = synchronous_evaluation(model, rows, 8);
  ASSERT_EQ(expected.count(), 36);
  for (InputStaging* via : {static_cast<InputStaging*>(nullptr), &staging}) {
    SCOPED_TRACE(via ? "through the input staging" : "with set_batch");
    const int64_t reads = host_scalar_reads();
    const ClassificationMetrics m =
        evaluate(model, rows, 8, options.max_tokens, 0, {}, EvalSplit::Validation, nullptr, "eval", via);
    EXPECT_EQ(host_scalar_reads(), reads) << "evaluation read a scalar back synchronously";
    EXPECT_EQ(m.count(), expected.count());
    EXPECT_EQ(m.confusion(), expected.confusion());
    EXPECT_EQ(m.to_json().dump(), expected.to_json().dump());
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, EvaluateTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Packed" : "Padded"; });

}  // namespace
}  // namespace ftune::test
