// The memory planner: its plan is the arena the trainer allocates (categories sum to it), the
// largest micro-batch is exact (plan(m) <= budget < plan(m + 1)) and never over budget across
// model shapes, checkpointing and adapters, and the batch choice splits the effective batch as
// documented (fewest accumulation steps, even micro-batches, checkpointing only when it reduces
// accumulation). Sizes parse with units and fail with the key named. A GPU plan with cuDNN's flash
// attention (bf16 / f16) keeps per layer only cuDNN's state, not the (B, H, T, T) probabilities;
// every other plan is unchanged by the attention setting.
#include "train/memory_planner.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "core/thread_pool.h"
#include "models/bert/encoder_config.h"
#include "ops/attention_cudnn.h"
#include "ops/embedding.h"

namespace ftune::test {
namespace {

EncoderConfig encoder(BertVariant family, int64_t vocab, int64_t hidden, int64_t layers,
                      int64_t heads, int64_t ffn) {
  EncoderConfig c;
  c.variant = family;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.intermediate_size = ffn;
  c.max_position_embeddings = 514;
  c.type_vocab_size = family == BertVariant::Bert ? 2 : 1;
  c.pad_token_id = family == BertVariant::Bert ? 0 : 1;
  c.set_num_labels(3);
  return c;
}

// BERT-base, all-MiniLM-L6-v2, a RoBERTa-shaped tiny model.
std::vector<EncoderConfig> models() {
  return {encoder(BertVariant::Bert, 30522, 768, 12, 12, 3072),
          encoder(BertVariant::Bert, 30522, 384, 6, 12, 1536),
          encoder(BertVariant::Roberta, 1000, 64, 2, 4, 128)};
}

std::vector<AdapterConfig> adapter_settings() {
  AdapterConfig none, lora, dora;
  lora.method = PeftMethod::Lora;
  lora.r = 8;
  lora.dropout = 0.1;
  dora.method = PeftMethod::Dora;
  dora.r = 4;
  dora.target_modules = {"query", "key", "value"};
  return {none, lora, dora};
}

TEST(MemoryPlanner, CategoriesSumToTheArenaPlanAndEveryBufferHasOne) {
  for (const EncoderConfig& m : models())
    for (const AdapterConfig& a : adapter_settings())
      for (auto ckpt : {GradientCheckpointing::Off, GradientCheckpointing::On}) {
        const PlanTarget t{m, a, 77, 0, Device::cpu()};
        const ArenaPlan arena = training_arena_plan(t, 12, ckpt);
        const MemoryPlan plan = plan_memory(t, 12, ckpt);
        EXPECT_EQ(plan.total, arena.total_bytes());
        size_t sum = 0;
        for (const MemoryCategory& c : plan.categories) sum += c.bytes;
        EXPECT_EQ(sum, plan.total);
        for (const PlannedBuffer& b : arena.buffers())
          EXPECT_NO_THROW(MemoryPlan::category_of(b.name)) << b.name;
      }
}

TEST(MemoryPlanner, ParametersGradientsAndMomentsFollowTheTrainableSet) {
  const EncoderConfig base = models()[0];
  const PlanTarget full{base, {}, 128, 0, Device::cpu()};
  const MemoryPlan f = plan_memory(full, 8, GradientCheckpointing::Off);
  auto bytes = [](const MemoryPlan& p, const std::string& name) {
    for (const MemoryCategory& c : p.categories)
      if (c.name == name) return c.bytes;
    ADD_FAILURE() << "no category " << name;
    return size_t{0};
  };
  // BERT-base with a 3-label head: 109.5M parameters, fp32.
  EXPECT_NEAR(bytes(f, "parameters") / 4.0, 109.48e6, 0.01e6);
  EXPECT_EQ(bytes(f, "gradients"), bytes(f, "parameters"));
  EXPECT_EQ(bytes(f, "optimizer state"), 2 * bytes(f, "parameters"));
  // LoRA: gradients and moments only for adapters + head, a small fraction.
  const PlanTarget lora{base, adapter_settings()[1], 128, 0, Device::cpu()};
  const MemoryPlan l = plan_memory(lora, 8, GradientCheckpointing::Off);
  EXPECT_LT(bytes(l, "gradients"), bytes(f, "gradients") / 50);
  EXPECT_EQ(bytes(l, "optimizer state"), 2 * bytes(l, "gradients"));
  // Checkpointing shrinks activations, not state.
  const MemoryPlan c = plan_memory(full, 8, GradientCheckpointing::On);
  EXPECT_LT(bytes(c, "activations"), bytes(f, "activations") / 3);
  EXPECT_EQ(bytes(c, "optimizer state"), bytes(f, "optimizer state"));
}

TEST(MemoryPlanner, PlanGrowsWithRowsAndSequenceLength) {
  for (const EncoderConfig& m : models()) {
    size_t prev = 0;
    for (int64_t rows : {1, 2, 5, 16, 33}) {
      const size_t now =
          plan_memory({m, {}, 64, 0, Device::cpu()}, rows, GradientCheckpointing::Off).total;
      EXPECT_GT(now, prev);
      prev = now;
    }
    EXPECT_LT(plan_memory({m, {}, 64, 0, Device::cpu()}, 8, GradientCheckpointing::Off).total,
              plan_memory({m, {}, 65, 0, Device::cpu()}, 8, GradientCheckpointing::Off).total);
  }
}

TEST(MemoryPlanner, EvaluationBatchLargerThanTheMicroBatchIsPlanned) {
  const EncoderConfig m = models()[1];
  const size_t train_only =
      plan_memory({m, {}, 64, 0, Device::cpu()}, 8, GradientCheckpointing::Off).total;
  EXPECT_EQ(plan_memory({m, {}, 64, 8, Device::cpu()}, 8, GradientCheckpointing::Off).total,
            train_only);
  EXPECT_EQ(plan_memory({m, {}, 64, 32, Device::cpu()}, 8, GradientCheckpointing::Off).total,
            plan_memory({m, {}, 64, 0, Device::cpu()}, 32, GradientCheckpointing::Off).total);
}

TEST(MemoryPlanner, LargestMicroBatchIsExactAndNeverOverBudget) {
  for (const EncoderConfig& m : models())
    for (const AdapterConfig& a : adapter_settings())
      for (auto ckpt : {GradientCheckpointing::Off, GradientCheckpointing::On})
        for (int64_t seq : {32, 128, 512}) {
          const PlanTarget t{m, a, seq, 0, Device::cpu()};
          const size_t one = plan_memory(t, 1, ckpt).total;
          const size_t per_row = plan_memory(t, 2, ckpt).total - one;
          for (double rows : {0.5, 1.0, 3.7, 40.2}) {
            const size_t budget = one + static_cast<size_t>(rows * per_row);
            const int64_t fit = largest_micro_batch(t, ckpt, budget, 4096);
            if (fit == 0) {
              EXPECT_GT(one, budget);
              continue;
            }
            EXPECT_LE(plan_memory(t, fit, ckpt).total, budget);
            EXPECT_GT(plan_memory(t, fit + 1, ckpt).total, budget)
                << "fit " << fit << " seq " << seq;
          }
          EXPECT_EQ(largest_micro_batch(t, ckpt, one - 1, 4096), 0);
          EXPECT_EQ(largest_micro_batch(t, ckpt, size_t{1} << 50, 77), 77);  // capped
        }
}

TEST(MemoryPlanner, SplitsTheEffectiveBatchIntoEvenMicroBatches) {
  using P = std::pair<int64_t, int64_t>;  // accumulation, micro-batch
  EXPECT_EQ(split_effective_batch(32, 32), P(1, 32));
  EXPECT_EQ(split_effective_batch(32, 100), P(1, 32));
  EXPECT_EQ(split_effective_batch(32, 27), P(2, 16));
  EXPECT_EQ(split_effective_batch(32, 10), P(4, 8));
  EXPECT_EQ(split_effective_batch(30, 7), P(5, 6));
  EXPECT_EQ(split_effective_batch(33, 16), P(3, 11));
  EXPECT_EQ(split_effective_batch(7, 1), P(7, 1));
}

TEST(MemoryPlanner, AutoBatchFitsTheBudgetAndReachesTheEffectiveBatch) {
  const EncoderConfig m = models()[1];
  const PlanTarget t{m, {}, 128, 0, Device::cpu()};
  for (int64_t room : {1, 5, 27, 31, 64}) {
    BatchRequest r;
    r.effective_batch = 32;
    r.checkpointing = GradientCheckpointing::Off;
    r.budget = plan_memory(t, room, GradientCheckpointing::Off).total;
    const BatchChoice c = choose_batch(t, r);
    EXPECT_LE(c.planned_bytes, r.budget);
    EXPECT_LE(c.micro_batch, room);
    EXPECT_GE(c.micro_batch * c.accumulation, 32);
    EXPECT_LT((c.micro_batch - 1) * c.accumulation, 32) << "micro-batches as even as possible";
    EXPECT_EQ(c.accumulation, (32 + std::min<int64_t>(room, 32) - 1) / std::min<int64_t>(room, 32));
    EXPECT_FALSE(c.over_budget);
  }
}

TEST(MemoryPlanner, CheckpointingAutoTurnsOnOnlyWhenItSavesAccumulationSteps) {
  const PlanTarget t{models()[0], {}, 256, 0, Device::cpu()};
  BatchRequest r;
  r.effective_batch = 32;
  r.checkpointing = GradientCheckpointing::Auto;
  // Room for 32 rows without checkpointing: off.
  r.budget = plan_memory(t, 32, GradientCheckpointing::Off).total;
  BatchChoice c = choose_batch(t, r);
  EXPECT_EQ(c.checkpointing, GradientCheckpointing::Off);
  EXPECT_EQ(c.micro_batch, 32);
  EXPECT_EQ(c.accumulation, 1);
  // Room for 12 rows without (3 steps) but 32 with checkpointing (1 step): on.
  r.budget = plan_memory(t, 12, GradientCheckpointing::Off).total;
  ASSERT_GE(largest_micro_batch(t, GradientCheckpointing::On, r.budget, 32), 32);
  c = choose_batch(t, r);
  EXPECT_EQ(c.checkpointing, GradientCheckpointing::On);
  EXPECT_EQ(c.accumulation, 1);
  EXPECT_EQ(c.fits_without_checkpointing, 12);
  EXPECT_NE(c.reason.find("checkpointing on"), std::string::npos) << c.reason;
  // Forced off keeps accumulation.
  r.checkpointing = GradientCheckpointing::Off;
  c = choose_batch(t, r);
  EXPECT_EQ(c.checkpointing, GradientCheckpointing::Off);
  EXPECT_EQ(c.accumulation, 3);
  EXPECT_EQ(c.micro_batch, 11);
}

TEST(MemoryPlanner, FixedMicroBatchIsKeptAndFlaggedWhenOverBudget) {
  const PlanTarget t{models()[1], {}, 128, 0, Device::cpu()};
  BatchRequest r;
  r.effective_batch = 64;
  r.micro_batch = 16;
  r.budget = plan_memory(t, 16, GradientCheckpointing::Off).total;
  BatchChoice c = choose_batch(t, r);
  EXPECT_EQ(c.micro_batch, 16);
  EXPECT_EQ(c.accumulation, 4);
  EXPECT_EQ(c.checkpointing, GradientCheckpointing::Off);
  EXPECT_FALSE(c.over_budget);
  r.budget = plan_memory(t, 10, GradientCheckpointing::Off).total;  // only fits with ckpt
  ASSERT_GE(largest_micro_batch(t, GradientCheckpointing::On, r.budget, 16), 16);
  c = choose_batch(t, r);
  EXPECT_EQ(c.checkpointing, GradientCheckpointing::On);
  EXPECT_FALSE(c.over_budget);
  r.checkpointing = GradientCheckpointing::Off;
  c = choose_batch(t, r);
  EXPECT_TRUE(c.over_budget);
  EXPECT_EQ(c.micro_batch, 16);
}

TEST(MemoryPlanner, NothingFitsIsAClearError) {
  const PlanTarget t{models()[0], {}, 512, 0, Device::cpu()};
  BatchRequest r;
  r.budget = 100u << 20;  // 100 MiB: BERT-base's weights alone are 418 MiB
  try {
    choose_batch(t, r);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("100.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("512 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("training.memory_budget"), std::string::npos) << m;
  }
}

// The CUDA attention kernels' documented contract (ops/attention_cuda.cu): the forward pass reads
// no workspace; the backward pass keeps the row sums r_i, T floats per (b, h) pair, and runs in
// one chunk when all B*H pairs fit. LayerNorm's CUDA backward reads none. The embeddings'
// backward sorts the tokens by id in the same buffer after the layers (ops/embedding.h). So a
// training plan for a GPU reserves the larger of rows*H*T floats and the sort's scratch for
// rows*T tokens, whatever the host's thread count.
int64_t cuda_workspace_floats(const EncoderConfig& m, int64_t rows, int64_t T) {
  return std::max(rows * m.num_heads * T,
                  embedding_backward_workspace(Device::cuda(0), rows * T, m.hidden_size));
}

// The CPU kernels' scratch: per compute thread (2T^2 + T) floats of scores for attention, 2C of
// partial sums for the LayerNorm backward.
int64_t cpu_workspace_floats(const EncoderConfig& m, int64_t T) {
  const int64_t threads = compute_threads();
  return std::max(threads * (2 * T * T + T), threads * 2 * m.hidden_size);
}

size_t workspace_bytes(const PlanTarget& t, int64_t micro_batch) {
  return training_arena_plan(t, micro_batch, GradientCheckpointing::Off)
      .buffer("work/encoder")
      .bytes;
}

TEST(MemoryPlanner, GpuPlanReservesTheAttentionWorkspaceTheCudaKernelsUse) {
  const Device gpu{DeviceKind::CUDA, 0};
  for (const EncoderConfig& m : models())
    for (const AdapterConfig& a : adapter_settings())
      for (const DType precision : {DType::F32, DType::BF16})
        for (const auto& [seq, eval_batch] : {std::pair<int64_t, int64_t>{128, 0}, {77, 48}}) {
          const PlanTarget t{m, a, seq, eval_batch, gpu, precision};
          for (const int64_t mb : {1, 8, 33}) {
            const int64_t rows = std::max(mb, eval_batch);
            EXPECT_EQ(workspace_bytes(t, mb), cuda_workspace_floats(m, rows, seq) * sizeof(float))
                << m.hidden_size << " " << seq << " " << mb;
            // The CPU plan is what it was: the CPU kernels' per-thread scratch.
            PlanTarget cpu = t;
            cpu.device = Device::cpu();
            cpu.precision = DType::F32;
            EXPECT_EQ(workspace_bytes(cpu, mb), cpu_workspace_floats(m, seq) * sizeof(float));
          }
        }
}

TEST(MemoryPlanner, GpuPlanDoesNotDependOnTheHostsThreads) {
  const int before = compute_threads();
  const PlanTarget t{models()[0], {}, 512, 0, Device{DeviceKind::CUDA, 0}, DType::BF16};
  set_compute_threads(1);
  const size_t one = plan_memory(t, 16, GradientCheckpointing::Off).total;
  set_compute_threads(64);
  const size_t many = plan_memory(t, 16, GradientCheckpointing::Off).total;
  const size_t cpu_many =
      plan_memory({t.model, {}, 512, 0, Device::cpu()}, 16, GradientCheckpointing::Off).total;
  set_compute_threads(1);
  const size_t cpu_one =
      plan_memory({t.model, {}, 512, 0, Device::cpu()}, 16, GradientCheckpointing::Off).total;
  set_compute_threads(before);
  EXPECT_EQ(one, many);
  EXPECT_EQ(cpu_many - cpu_one, align_up(64 * (2 * 512 * 512 + 512) * sizeof(float)) -
                                    align_up((2 * 512 * 512 + 512) * sizeof(float)));
}

// BERT-base on an 80 GiB GPU at the default memory fraction: the largest micro-batch under the
// GPU-exact workspace against the plan that reserved the CPU kernels' scratch for `threads` host
// threads (what the planner did before: 16 on a 16-core GPU host, 128 on a large one). The new
// plan is the old one with the workspace swapped, so the micro-batch grows by what that
// difference holds.
TEST(MemoryPlanner, GpuWorkspaceLetsTheLargestMicroBatchGrow) {
  const EncoderConfig bert = models()[0];
  const Device gpu{DeviceKind::CUDA, 0};
  for (const int64_t threads : {int64_t{16}, int64_t{128}})
    for (const size_t gib : {size_t{24}, size_t{80}})
      for (const int64_t seq : {int64_t{128}, int64_t{512}})
        for (const DType precision : {DType::BF16, DType::F32}) {
          const PlanTarget t{bert, {}, seq, 0, gpu, precision};
          const size_t budget = static_cast<size_t>(0.95 * static_cast<double>(gib << 30));
          const int64_t cpu_ws =
              std::max(threads * (2 * seq * seq + seq), threads * 2 * bert.hidden_size);
          auto old_total = [&](int64_t mb) {
            return plan_memory(t, mb, GradientCheckpointing::Off).total -
                   align_up(workspace_bytes(t, mb)) + align_up(cpu_ws * sizeof(float));
          };
          int64_t old_fit = 0;
          while (old_total(old_fit + 1) <= budget) ++old_fit;
          const int64_t fit = largest_micro_batch(t, GradientCheckpointing::Off, budget, 100000);
          // The GPU workspace grows with the rows (rows x H x T floats): where at old_fit it is
          // larger than the CPU scratch it replaced (16 threads, 128 tokens, ~1,200 rows), the
          // old plan was the smaller one and the fit may fall by what the difference holds.
          if (workspace_bytes(t, old_fit) <= align_up(cpu_ws * sizeof(float)))
            EXPECT_GE(fit, old_fit);
          else
            EXPECT_GE(fit, old_fit - 1);
          ASSERT_GT(fit, 0);
          EXPECT_LE(plan_memory(t, fit, GradientCheckpointing::Off).total, budget);
          EXPECT_GT(plan_memory(t, fit + 1, GradientCheckpointing::Off).total, budget);
          // Each extra row costs the same activations; the freed scratch buys whole rows.
          const size_t freed = align_up(cpu_ws * sizeof(float)) - align_up(workspace_bytes(t, 1));
          const size_t per_row = plan_memory(t, 2, GradientCheckpointing::Off).total -
                                 plan_memory(t, 1, GradientCheckpointing::Off).total;
          EXPECT_LE(fit - old_fit, static_cast<int64_t>(freed / per_row) + 1);
          fmt::print(
              "BERT-base {} tokens {} at 0.95 x {} GiB: largest micro-batch {} -> {} (before: "
              "{} host threads' CPU scratch)\n",
              seq, dtype_name(precision), gib, old_fit, fit, threads);
        }
}

// cuDNN's state per layer, from the layout documented in ops/attention_cudnn.h: stats (B, H, T)
// f32, then seq_lens (2B) i32, rng (2) i64 and the ragged offsets (2 (B + 1)) i64, 16-byte aligned.
size_t cudnn_state_bytes(int64_t B, int64_t H, int64_t T) {
  auto align16 = [](int64_t n) { return (n + 15) / 16 * 16; };
  const int64_t seq_lens = align16(4 * B * H * T), rng = align16(seq_lens + 8 * B);
  const int64_t ragged = rng + 16;  // packed rows' 2 (B + 1) i64 offsets
  return static_cast<size_t>(ragged + 16 * (B + 1));
}

// cudnn_attention_workspace_floats as documented: an fp32 (B, H, T, D) dQ accumulator + 16 MiB.
int64_t cudnn_workspace_floats(const EncoderConfig& m, int64_t rows, int64_t T) {
  return rows * m.num_heads * T * m.head_dim() + (int64_t{16} << 20) / 4;
}

TEST(MemoryPlanner, CudnnAttentionPlansOnlyItsStatePerLayer) {
  const Device gpu{DeviceKind::CUDA, 0};
  for (const EncoderConfig& m : models())
    for (const AdapterConfig& a : adapter_settings())
      for (const DType precision : {DType::BF16, DType::F16})
        for (auto ckpt : {GradientCheckpointing::Off, GradientCheckpointing::On})
          for (const auto& [seq, eval_batch] : {std::pair<int64_t, int64_t>{128, 0}, {77, 48}}) {
            PlanTarget ftune{m, a, seq, eval_batch, gpu, precision};
            PlanTarget cudnn = ftune;
            cudnn.attention = AttentionKernel::Cudnn;
            for (const int64_t mb : {1, 8, 33}) {
              const int64_t rows = std::max(mb, eval_batch);
              const ArenaPlan with = training_arena_plan(cudnn, mb, ckpt);
              const ArenaPlan without = training_arena_plan(ftune, mb, ckpt);
              ASSERT_EQ(with.buffers().size(), without.buffers().size());
              int64_t layers = 0;
              size_t saved = 0;
              for (size_t i = 0; i < with.buffers().size(); ++i) {
                const PlannedBuffer& b = with.buffers()[i];
                const PlannedBuffer& f = without.buffers()[i];
                ASSERT_EQ(b.name, f.name);
                if (MemoryPlan::category_of(b.name) == std::string("attention")) {
                  ++layers;
                  EXPECT_EQ(b.bytes, cudnn_state_bytes(rows, m.num_heads, seq)) << b.name;
                  EXPECT_EQ(f.bytes, size_t(rows * m.num_heads * seq * seq) * sizeof(float));
                  saved += align_up(f.bytes) - align_up(b.bytes);
                } else if (b.name == "work/encoder") {
                  EXPECT_EQ(b.bytes, std::max(cuda_workspace_floats(m, rows, seq),
                                              cudnn_workspace_floats(m, rows, seq)) *
                                         sizeof(float));
                  EXPECT_EQ(f.bytes, cuda_workspace_floats(m, rows, seq) * sizeof(float));
                } else {
                  EXPECT_EQ(b.bytes, f.bytes) << b.name;
                }
              }
              EXPECT_EQ(layers, ckpt == GradientCheckpointing::On ? 1 : m.num_layers);
              const MemoryPlan pc = plan_memory(cudnn, mb, ckpt), pf = plan_memory(ftune, mb, ckpt);
              EXPECT_EQ(pc.arena, with.total_bytes());
              for (size_t i = 0; i < pc.categories.size(); ++i)
                if (pc.categories[i].name == "attention") {
                  EXPECT_EQ(pf.categories[i].bytes - pc.categories[i].bytes, saved);
                  EXPECT_NE(pc.categories[i].note.find("not stored"), std::string::npos);
                  EXPECT_EQ(pf.categories[i].note.find("not stored"), std::string::npos);
                }
            }
          }
}

TEST(MemoryPlanner, AttentionSettingLeavesCpuAndFp32PlansUnchanged) {
  // cuDNN runs only 16-bit attention on a GPU: a CPU plan (any precision) and a GPU fp32 plan are
  // the same whatever the attention kernel.
  for (const EncoderConfig& m : models())
    for (const AdapterConfig& a : adapter_settings())
      for (auto ckpt : {GradientCheckpointing::Off, GradientCheckpointing::On})
        for (const auto& [device, precision] :
             {std::pair{Device::cpu(), DType::F32}, std::pair{Device::cpu(), DType::BF16},
              std::pair{Device{DeviceKind::CUDA, 0}, DType::F32}}) {
          PlanTarget ftune{m, a, 77, 0, device, precision};
          PlanTarget cudnn = ftune;
          cudnn.attention = AttentionKernel::Cudnn;
          const ArenaPlan x = training_arena_plan(ftune, 12, ckpt),
                          y = training_arena_plan(cudnn, 12, ckpt);
          ASSERT_EQ(x.buffers().size(), y.buffers().size());
          for (size_t i = 0; i < x.buffers().size(); ++i) {
            EXPECT_EQ(x.buffers()[i].name, y.buffers()[i].name);
            EXPECT_EQ(x.buffers()[i].bytes, y.buffers()[i].bytes) << x.buffers()[i].name;
            EXPECT_EQ(x.buffers()[i].dtype, y.buffers()[i].dtype) << x.buffers()[i].name;
          }
          EXPECT_EQ(x.total_bytes(), y.total_bytes());
        }
}

// BERT-base in bf16 on a 24 GiB and an 80 GiB GPU at the default memory fraction: the largest
// micro-batch with cuDNN's state per layer against ftune's kernel with the probabilities, exact
// (plan(fit) <= budget < plan(fit + 1)) and larger, the more so the longer the sequences.
TEST(MemoryPlanner, CudnnAttentionLetsTheLargestMicroBatchGrow) {
  const EncoderConfig bert = models()[0];
  const Device gpu{DeviceKind::CUDA, 0};
  for (const size_t gib : {size_t{24}, size_t{80}})
    for (const int64_t seq : {int64_t{128}, int64_t{512}})
      for (auto ckpt : {GradientCheckpointing::Off, GradientCheckpointing::On}) {
        const size_t budget = static_cast<size_t>(0.95 * static_cast<double>(gib << 30));
        PlanTarget ftune{bert, {}, seq, 0, gpu, DType::BF16};
        PlanTarget cudnn = ftune;
        cudnn.attention = AttentionKernel::Cudnn;
        const int64_t f = largest_micro_batch(ftune, ckpt, budget, 100000);
        const int64_t c = largest_micro_batch(cudnn, ckpt, budget, 100000);
        for (const auto& [t, fit] : {std::pair{ftune, f}, std::pair{cudnn, c}}) {
          ASSERT_GT(fit, 0);
          EXPECT_LE(plan_memory(t, fit, ckpt).total, budget);
          EXPECT_GT(plan_memory(t, fit + 1, ckpt).total, budget);
        }
        EXPECT_GT(c, f);
        // Without the probabilities a row costs less by their 12 layers' (or one slot's) H*T*T
        // floats (the state takes H*T plus a little).
        const auto per_row = [&](const PlanTarget& t) {
          return plan_memory(t, 2, ckpt).total - plan_memory(t, 1, ckpt).total;
        };
        EXPECT_LT(per_row(cudnn), per_row(ftune));
        fmt::print(
            "BERT-base {} tokens bf16 at 0.95 x {} GiB, gradient checkpointing {}: largest "
            "micro-batch {} with ftune's kernel (probabilities stored), {} with cuDNN (state "
            "only)\n",
            seq, gib, gradient_checkpointing_name(ckpt), f, c);
      }
}

TEST(MemoryPlanner, ParsesSizes) {
  EXPECT_EQ(parse_bytes("8GiB", "k"), size_t{8} << 30);
  EXPECT_EQ(parse_bytes("512MiB", "k"), size_t{512} << 20);
  EXPECT_EQ(parse_bytes("1.5 GiB", "k"), size_t{3} << 29);
  EXPECT_EQ(parse_bytes("16GB", "k"), size_t{16000000000});
  EXPECT_EQ(parse_bytes("1000000", "k"), size_t{1000000});
  for (const char* bad : {"", "GiB", "8 parsecs", "-1GiB", "0", "nan"}) {
    try {
      parse_bytes(bad, "key 'training.memory_budget'");
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("training.memory_budget"), std::string::npos);
    }
  }
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(size_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace ftune::test
