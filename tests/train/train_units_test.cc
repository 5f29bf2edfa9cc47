// Units of the training loop: LR schedules (values of transformers' get_*_schedule_with_warmup),
// metrics from a known confusion matrix, length-bucketed batches (deterministic per seed and
// epoch, every example once per epoch, similar lengths together), the CPU budget's reserve for
// the process outside the arena; the decoder presets' LoRA defaults under the user's keys.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "data/batcher.h"
#include "optim/lr_schedule.h"
#include "train/host_reserve.h"
#include "train/metrics.h"
#include "train/train_config.h"

namespace ftune {
namespace {

TEST(LrSchedule, MatchesTransformersFormulas) {
  // get_linear_schedule_with_warmup(opt, 2, 10): factors 0, .5, 1, 7/8, ..., 1/8, 0
  const LrSchedule lin{ScheduleKind::Linear, 1.0, 2, 10};
  const double expect_lin[] = {0, 0.5, 1, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0, 0};
  for (int s = 0; s < 12; ++s) EXPECT_NEAR(lin.factor(s), expect_lin[s], 1e-12) << s;
  // get_cosine_schedule_with_warmup(opt, 1, 5): 0, 1, 0.8535534, 0.5, 0.1464466, 0
  const LrSchedule cos{ScheduleKind::Cosine, 1.0, 1, 5};
  const double expect_cos[] = {0, 1, 0.8535533905932737, 0.5, 0.14644660940672627, 0};
  for (int s = 0; s < 6; ++s) EXPECT_NEAR(cos.factor(s), expect_cos[s], 1e-12) << s;
  const LrSchedule constant{ScheduleKind::Constant, 2.0, 4, 100};
  EXPECT_DOUBLE_EQ(constant.lr(1), 0.5);
  EXPECT_DOUBLE_EQ(constant.lr(50), 2.0);
  EXPECT_THROW(parse_schedule_kind("step", "training.schedule"), InputError);
}

TEST(Presets, DecoderPresetsAdaptEveryLinearLayerUnderTheUsersKeys) {
  const std::vector<std::string> linear = {"q_proj", "k_proj", "v_proj", "o_proj",
                                           "gate_proj", "up_proj", "down_proj"};
  for (const char* preset : {"llama", "qwen", "gemma"}) {
    const TrainConfig c = TrainConfig::parse(
        YAML::Load(std::string("preset: ") + preset + "\nmodel: {path: m}\ndata: {train: t.jsonl}\npeft: {r: 8}\n"), "cfg");
    EXPECT_EQ(c.peft.method, PeftMethod::Lora) << preset;
    EXPECT_EQ(c.peft.r, 8) << preset;  // the user's key stays
    EXPECT_EQ(c.peft.alpha, 32.0) << preset;
    EXPECT_EQ(c.peft.dropout, 0.05) << preset;
    EXPECT_EQ(c.peft.target_modules, linear) << preset;
    EXPECT_EQ(choice_name(c.training.schedule), "cosine") << preset;
    EXPECT_EQ(c.training.learning_rate, std::string(preset) == "gemma" ? 5e-5 : 1e-4) << preset;
    EXPECT_EQ(c.data.max_length, 512) << preset;
  }
  // peft.method none keeps full fine-tuning under a decoder preset.
  const TrainConfig full = TrainConfig::parse(
      YAML::Load("preset: llama\nmodel: {path: m}\ndata: {train: t.jsonl}\npeft: {method: none}\n"), "cfg");
  EXPECT_EQ(full.peft.method, PeftMethod::None);
}

TEST(Metrics, KnownConfusionMatrix) {
  // true\pred: [[5, 1], [2, 2]]
  ClassificationMetrics m(2);
  const float neg[] = {1, 0}, pos[] = {0, 1};
  for (int i = 0; i < 5; ++i) m.add(neg, 0);
  m.add(pos, 0);
  m.add(neg, 1);
  m.add(neg, 1);
  m.add(pos, 1);
  m.add(pos, 1);
  m.add(pos, -100);  // ignored
  EXPECT_EQ(m.count(), 10);
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.7);
  EXPECT_DOUBLE_EQ(m.precision(1), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.recall(1), 0.5);
  EXPECT_NEAR(m.f1(1), 4.0 / 7.0, 1e-12);
  EXPECT_NEAR(m.macro_f1(), (4.0 / 7.0 + 10.0 / 13.0) / 2, 1e-12);
  // sklearn.metrics.matthews_corrcoef([0]*6+[1]*4, [0]*5+[1]+[0,0,1,1]) = 0.35634832254989923
  EXPECT_NEAR(m.mcc(), 0.35634832254989923, 1e-12);
}

TEST(Batcher, DeterministicCoversEveryExampleAndGroupsLengths) {
  std::vector<data::TokenizedExample> ex(1000);
  for (size_t i = 0; i < ex.size(); ++i) ex[i].input_ids.assign(1 + (i * 7919) % 97, 1);
  const data::LengthBucketedBatcher batcher(&ex, 16, 5, 8);
  const auto e0 = batcher.epoch(0), again = batcher.epoch(0), e1 = batcher.epoch(1);
  EXPECT_EQ(e0, again);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(static_cast<int64_t>(e0.size()), batcher.batches_per_epoch());
  std::set<int64_t> seen;
  int64_t padded = 0, real = 0;
  for (const auto& b : e0) {
    size_t longest = 0;
    for (int64_t i : b) {
      EXPECT_TRUE(seen.insert(i).second);
      longest = std::max(longest, ex[i].input_ids.size());
      real += ex[i].input_ids.size();
    }
    padded += static_cast<int64_t>(longest * b.size());
  }
  EXPECT_EQ(seen.size(), ex.size());
  // Random batching of lengths uniform in [1, 97] wastes ~45% on padding; pools of 8 batches far
  // less.
  EXPECT_LT(double(padded - real) / padded, 0.12);
}

TEST(HostReserve, CountsWhatAvailableMemoryDoesNotExclude) {
  ProcessMemory process;
  process.rss = 300 << 20;
  process.rss_anon = 200 << 20;
  process.rss_file = 100 << 20;
  const size_t after = kHostBytesFixed + 2 * kHostBytesPerThread + 1000;
  // MemAvailable counts the process's mapped files as free: they are held back.
  const HostReserve meminfo =
      host_reserve({size_t{2} << 30, size_t{4} << 30, "/proc/meminfo"}, process, 2, 1000);
  EXPECT_EQ(meminfo.unaccounted_rss, size_t{100} << 20);
  EXPECT_EQ(meminfo.after_plan, after);
  // A cgroup charges them already.
  const HostReserve cgroup =
      host_reserve({size_t{2} << 30, size_t{4} << 30, "cgroup memory.max"}, process, 2, 1000);
  EXPECT_EQ(cgroup.unaccounted_rss, 0u);
  EXPECT_EQ(cgroup.total(), after);
  // An artificial limit bounds the arena's allocations only.
  EXPECT_EQ(
      host_reserve({size_t{1} << 30, size_t{1} << 30, "memory limit"}, process, 2, 1000).total(),
      0u);
  // The budget is the smaller of the fraction and what the reserve leaves.
  const size_t gib = size_t{1} << 30;
  EXPECT_EQ(cpu_budget(20 * gib, 0.95, 300 << 20), static_cast<size_t>(0.95 * 20 * gib));
  EXPECT_EQ(cpu_budget(gib, 0.95, 300 << 20), gib - (300 << 20));
  EXPECT_EQ(cpu_budget(gib, 1.0, 2 * gib), 0u);
}

}  // namespace
}  // namespace ftune
