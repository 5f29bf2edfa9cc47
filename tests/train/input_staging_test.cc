// Input staging (train/input_staging.h) on every device present: each staged micro-batch holds
// exactly what slice_rows and position_ids give for the same rows (ids, type ids, positions, mask
// cut to the micro-batch's own longest row, labels), through both slots and their reuse, for BERT
// and RoBERTa position ids.
#include <algorithm>
#include <cstring>

#include "core/arena.h"
#include "core/memory.h"
#include "models/batch.h"
#include "models/bert/encoder_config.h"
#include "ops/op_test_util.h"
#include "train/input_staging.h"

namespace ftune::test {
namespace {

class InputStagingTest : public OpTest {};

std::vector<int32_t> read_i32(TensorView v) {
  std::vector<int32_t> out(static_cast<size_t>(v.numel()));
  copy(TensorView(out.data(), DType::I32, Device::cpu(), v.shape), v);
  return out;
}

TEST_P(InputStagingTest, StagedMicroBatchesMatchTheirCutRows) {
  for (const BertVariant family : {BertVariant::Bert, BertVariant::Roberta}) {
    SCOPED_TRACE(family == BertVariant::Bert ? "bert" : "roberta");
    EncoderConfig config;
    config.variant = family;
    config.pad_token_id = family == BertVariant::Bert ? 0 : 1;
    // A right-padded batch of 7 rows of up to 12 tokens, of random lengths.
    const int64_t B = 7, T = 12;
    Batch step;
    step.size = B;
    step.seq_len = T;
    for (int64_t r = 0; r < B; ++r) {
      const int64_t len = 1 + static_cast<int64_t>(rng() % T);
      for (int64_t t = 0; t < T; ++t) {
        const bool real = t < len;
        step.input_ids.push_back(real ? 5 + static_cast<int32_t>(rng() % 100)
                                      : static_cast<int32_t>(config.pad_token_id));
        step.token_type_ids.push_back(real && t > len / 2 ? 1 : 0);
        step.attention_mask.push_back(real ? 1 : 0);
      }
      step.labels.push_back(r == 3 ? -100 : static_cast<int32_t>(rng() % 3));
    }
    const std::vector<int32_t> positions = position_ids(config, step);

    InputStaging staging(4, T);
    ArenaPlan plan;
    staging.add_to_plan(plan);
    Arena arena(device(), plan);
    staging.bind(arena);
    // Slot 0, slot 1, then slot 0 again (its copy waits until the compute side released it).
    const std::pair<int64_t, int64_t> cuts[] = {{0, 4}, {4, 3}, {2, 3}, {6, 1}};
    int expected_slot = 0;
    for (const auto& [row0, rows] : cuts) {
      SCOPED_TRACE(row0);
      const int slot = staging.stage(step, positions, row0, rows);
      EXPECT_EQ(slot, expected_slot);
      expected_slot = (expected_slot + 1) % InputStaging::kSlots;
      const StagedInputs in = staging.acquire(slot);
      const Batch cut = slice_rows(step, row0, rows);
      ASSERT_EQ(in.inputs.B, cut.size);
      ASSERT_EQ(in.inputs.T, cut.seq_len);
      EXPECT_EQ(read_i32(in.inputs.ids), cut.input_ids);
      EXPECT_EQ(read_i32(in.inputs.type_ids), cut.token_type_ids);
      EXPECT_EQ(read_i32(in.inputs.pos_ids), position_ids(config, cut));
      EXPECT_EQ(read_i32(in.inputs.mask), cut.attention_mask);
      EXPECT_EQ(read_i32(in.labels), cut.labels);
    }
  }
}

// Micro-batches padded to a multiple of 8 within a step batch padded likewise (the trainer's
// pad_to_length), each carrying its MicroParams at the start of its slot.
TEST_P(InputStagingTest, PadsToTheMultipleAndCarriesTheMicroParams) {
  EncoderConfig config;
  config.pad_token_id = 0;
  const int64_t lens[] = {2, 3, 9, 11, 13};
  const int64_t B = 5;
  Batch step;
  step.size = B;
  step.seq_len = 13;
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t < 13; ++t) {
      step.input_ids.push_back(t < lens[r] ? 7 + static_cast<int32_t>(t) : 0);
      step.attention_mask.push_back(t < lens[r] ? 1 : 0);
    }
    step.labels.push_back(static_cast<int32_t>(r % 2));
  }
  Batch padded = step;
  pad_to_length(padded, 16, 0);
  ASSERT_EQ(padded.seq_len, 16);
  EXPECT_EQ(padded.real_tokens(), step.real_tokens());
  EXPECT_TRUE(padded.token_type_ids.empty());  // all zeros stays implicit
  const std::vector<int32_t> positions = position_ids(config, padded);

  InputStaging staging(2, 16, PadRule{8, false});
  ArenaPlan plan;
  staging.add_to_plan(plan);
  Arena arena(device(), plan);
  staging.bind(arena);
  struct Cut {
    int64_t row0, rows, T;  // T: the longest row rounded up to 8, at most the step's 16
  };
  for (const Cut c : {Cut{0, 2, 8}, Cut{2, 2, 16}, Cut{4, 1, 16}}) {
    SCOPED_TRACE(c.row0);
    MicroParams m;
    m.row0 = static_cast<uint64_t>(c.row0);
    m.offset = 41;
    m.grad_scale = 0.5f + static_cast<float>(c.row0);
    m.loss_share = 0.125 * static_cast<double>(c.rows);
    const int slot = staging.stage(padded, positions, c.row0, c.rows, m);
    const StagedInputs in = staging.acquire(slot);
    ASSERT_EQ(in.inputs.T, c.T);
    Batch want = slice_rows(padded, c.row0, c.rows);
    pad_to_length(want, c.T, 0);
    EXPECT_EQ(read_i32(in.inputs.ids), want.input_ids);
    EXPECT_EQ(read_i32(in.inputs.mask), want.attention_mask);
    EXPECT_EQ(read_i32(in.inputs.pos_ids), position_ids(config, want));
    MicroParams got;
    copy(TensorView(&got, DType::U8, Device::cpu(), Shape{sizeof(MicroParams)}),
         TensorView(const_cast<MicroParams*>(in.micro), DType::U8, device(),
                    Shape{sizeof(MicroParams)}));
    EXPECT_EQ(got.row0, m.row0);
    EXPECT_EQ(got.offset, m.offset);
    EXPECT_EQ(got.grad_scale, m.grad_scale);
    EXPECT_EQ(got.loss_share, m.loss_share);
  }
}

// A CUDA graph replays the addresses it captured: every micro-batch, whichever slot carried it,
// must reach the model at the same addresses, with its own contents, also when the next slot was
// staged before the current one was acquired (the trainer stages k + 1 while k computes).
TEST_P(InputStagingTest, EverySlotReachesTheModelAtTheSameAddresses) {
  EncoderConfig config;
  Batch step;
  step.size = 4;
  step.seq_len = 3;
  step.input_ids = {101, 7, 102, 101, 8, 102, 101, 9, 102, 101, 10, 102};
  step.attention_mask = std::vector<int32_t>(12, 1);
  step.labels = {0, 1, 1, 0};
  const std::vector<int32_t> positions = position_ids(config, step);
  InputStaging staging(2, 3);
  ArenaPlan plan;
  staging.add_to_plan(plan);
  Arena arena(device(), plan);
  staging.bind(arena);
  const int s0 = staging.stage(step, positions, 0, 2);
  const int s1 = staging.stage(step, positions, 2, 2);
  ASSERT_NE(s0, s1);
  const StagedInputs a = staging.acquire(s0);
  EXPECT_EQ(read_i32(a.inputs.ids), (std::vector<int32_t>{101, 7, 102, 101, 8, 102}));
  EXPECT_EQ(read_i32(a.labels), (std::vector<int32_t>{0, 1}));
  const StagedInputs b = staging.acquire(s1);
  EXPECT_EQ(read_i32(b.inputs.ids), (std::vector<int32_t>{101, 9, 102, 101, 10, 102}));
  EXPECT_EQ(read_i32(b.labels), (std::vector<int32_t>{1, 0}));
  for (const auto& [x, y] : {std::pair{a.inputs.ids, b.inputs.ids},
                             std::pair{a.inputs.type_ids, b.inputs.type_ids},
                             std::pair{a.inputs.pos_ids, b.inputs.pos_ids},
                             std::pair{a.inputs.mask, b.inputs.mask}, std::pair{a.labels, b.labels}})
    EXPECT_EQ(x.data, y.data);
  EXPECT_EQ(a.micro, b.micro);
}

TEST_P(InputStagingTest, MissingTypeIdsStageAsZeros) {
  EncoderConfig config;
  Batch step;
  step.size = 2;
  step.seq_len = 3;
  step.input_ids = {101, 7, 102, 101, 102, 0};
  step.attention_mask = {1, 1, 1, 1, 1, 0};
  step.labels = {0, 1};
  InputStaging staging(2, 3);
  ArenaPlan plan;
  staging.add_to_plan(plan);
  Arena arena(device(), plan);
  staging.bind(arena);
  const StagedInputs in = staging.acquire(staging.stage(step, position_ids(config, step), 0, 2));
  EXPECT_EQ(read_i32(in.inputs.type_ids), std::vector<int32_t>(6, 0));
  EXPECT_EQ(read_i32(in.inputs.pos_ids), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

TEST_P(InputStagingTest, FloatTargetsTravelWithTheirRowsPaddedAndPacked) {
  // A score task's targets (two per row here, as a multi-label head's) after the labels, as f32.
  EncoderConfig config;
  Batch step;
  step.size = 3;
  step.seq_len = 3;
  step.input_ids = {101, 7, 102, 101, 102, 0, 101, 9, 102};
  step.attention_mask = {1, 1, 1, 1, 1, 0, 1, 1, 1};
  step.labels = {0, 0, 0};
  step.targets = {0.25f, 1.0f, -3.5f, 0.0f, 7.0f, 0.5f};
  for (const int64_t packed : {int64_t{0}, int64_t{9}}) {
    InputStaging staging(2, 3, PadRule{}, packed, 2);
    ArenaPlan plan;
    staging.add_to_plan(plan);
    Arena arena(device(), plan);
    staging.bind(arena);
    const StagedInputs in = staging.acquire(staging.stage(step, position_ids(config, step), 1, 2));
    ASSERT_TRUE(in.targets.defined());
    EXPECT_EQ(in.targets.dtype, DType::F32);
    EXPECT_EQ(in.targets.shape, (Shape{2, 2}));
    EXPECT_EQ(to_vector(in.targets), (std::vector<float>{-3.5f, 0.0f, 7.0f, 0.5f})) << packed;
    EXPECT_EQ(read_i32(in.labels), (std::vector<int32_t>{0, 0}));
    // A batch without targets stages none.
    Batch plain = step;
    plain.targets.clear();
    EXPECT_FALSE(
        staging.acquire(staging.stage(plain, position_ids(config, plain), 0, 1)).targets.defined());
  }
}

FTUNE_INSTANTIATE_DEVICES(InputStagingTest);

}  // namespace
}  // namespace ftune::test
