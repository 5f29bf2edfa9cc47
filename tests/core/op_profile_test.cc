// The per-op step profile (core/op_profile.h) on the CPU's host clock: nested scopes keep only
// their own time, rows add up to at most the step, nothing is recorded outside a step.
#include "core/op_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

namespace ftune::profile {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const OpRow* find(const StepProfile& p, const std::string& name) {
  for (const OpRow& r : p.ops)
    if (r.name == name) return &r;
  return nullptr;
}

TEST(OpProfile, NestedScopesKeepTheirOwnTimeAndTheRowsAddUpToTheStep) {
  auto rec = StepRecorder::always(3, Device::cpu());
  ASSERT_TRUE(rec.active());
  {
    OpScope outer("linear_forward", Device::cpu());
    sleep_ms(20);
    OpScope inner("gemm", Device::cpu());
    sleep_ms(40);
  }
  for (int i = 0; i < 2; ++i) {
    OpScope other("layer_norm_forward", Device::cpu());
    sleep_ms(5);
  }
  sleep_ms(5);  // outside any op: the gap
  const StepProfile p = rec.finish();
  EXPECT_FALSE(rec.active());
  EXPECT_EQ(p.step, 3);
  EXPECT_EQ(p.clock, "host clock");
  ASSERT_EQ(p.ops.size(), 3u);
  const OpRow* outer = find(p, "linear_forward");
  const OpRow* gemm = find(p, "linear_forward > gemm");
  const OpRow* ln = find(p, "layer_norm_forward");
  ASSERT_TRUE(outer && gemm && ln);
  // Sleeps last at least what they ask. Had the outer op kept the GEMM's 40 ms as well, the rows
  // would add up to more than the step (whose gap is only the 5 ms sleep and bookkeeping).
  EXPECT_GE(outer->ms, 20.0);
  EXPECT_GE(gemm->ms, 40.0);
  EXPECT_GE(ln->ms, 10.0);
  EXPECT_EQ(outer->calls, 1);
  EXPECT_EQ(ln->calls, 2);
  EXPECT_NEAR(p.ops_ms, outer->ms + gemm->ms + ln->ms, 1e-9);
  EXPECT_LE(p.ops_ms, p.step_ms);
  EXPECT_GE(p.gap_ms, 5.0);
  EXPECT_NEAR(p.gap_ms, p.step_ms - p.ops_ms, 1e-9);
  EXPECT_GE(p.host_step_ms, p.step_ms);
  EXPECT_EQ(p.ops.front().name, "linear_forward > gemm");  // largest first

  const nlohmann::json j = p.to_json();
  EXPECT_EQ(j["ops"].size(), 3u);
  EXPECT_EQ(j["ops"][0]["name"], "linear_forward > gemm");
  const std::string table = p.table();
  EXPECT_NE(table.find("linear_forward > gemm"), std::string::npos) << table;
  EXPECT_NE(table.find("gap (launch gaps, host waits, non-op work)"), std::string::npos) << table;
  EXPECT_NE(table.find("all ops"), std::string::npos) << table;
}

TEST(OpProfile, NothingIsRecordedOutsideAStepOrOnAnotherThreadOrDevice) {
  {
    OpScope before("before", Device::cpu());  // no step being recorded
  }
  auto rec = StepRecorder::always(1, Device::cpu());
  std::thread([] { OpScope elsewhere("other_thread", Device::cpu()); }).join();
  { OpScope gpu("on_the_gpu", Device::cuda(0)); }
  { OpScope mine("mine", Device::cpu()); }
  const StepProfile p = rec.finish();
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].name, "mine");
  { OpScope after("after", Device::cpu()); }  // the recording is over
  auto again = StepRecorder::always(2, Device::cpu());
  EXPECT_TRUE(again.finish().ops.empty());
}

TEST(OpProfile, OnlyTheProfiledStepOfARunIsRecordedAndOnlyWhenAskedFor) {
  // FTUNE_PROFILE_OPS is not set in the test environment: no step of a run records.
  if (ops_enabled()) GTEST_SKIP() << "FTUNE_PROFILE_OPS is set in this environment";
  StepRecorder rec(profiled_step(10), 10, Device::cpu());
  EXPECT_FALSE(rec.active());
  EXPECT_EQ(profiled_step(10), 3);  // FTUNE_PROFILE_STEP unset: after the first steps
  EXPECT_EQ(profiled_step(2), 2);   // a shorter run: its last step
  EXPECT_EQ(profiled_step(0), 1);
}

}  // namespace
}  // namespace ftune::profile
