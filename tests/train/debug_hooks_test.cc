// The fault-injection hooks (train/debug_hooks.h): read from the environment once, into values the
// step loop compares against; unset hooks are off; the non-finite step list takes single steps and
// inclusive ranges.
#include <gtest/gtest.h>

#include <cstdlib>

#include "train/debug_hooks.h"

namespace ftune {
namespace {

const char* const kHooks[] = {
    "FTUNE_DEBUG_EXIT_AT_MICRO_STEP", "FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT",
    "FTUNE_DEBUG_SIGTERM_AT_STEP",    "FTUNE_DEBUG_MICRO_BATCH_AT_STEP",
    "FTUNE_DEBUG_NONFINITE_STEPS",    "FTUNE_DEBUG_OOM_AT_STEP",
    "FTUNE_DEBUG_ARENA_MEMORY",       "FTUNE_DEBUG_LOSS_SCALE"};

struct ClearHooks {
  ClearHooks() { clear(); }
  ~ClearHooks() { clear(); }
  static void clear() {
    for (const char* name : kHooks) unsetenv(name);
  }
};

TEST(DebugHooks, UnsetHooksAreOff) {
  ClearHooks clean;
  const DebugHooks h = DebugHooks::from_env();
  EXPECT_EQ(h.exit_at_micro_step, -1);
  EXPECT_EQ(h.exit_after_checkpoint, -1);
  EXPECT_EQ(h.sigterm_at_step, -1);
  EXPECT_EQ(h.micro_batch_step, -1);
  EXPECT_EQ(h.oom_at_step, -1);
  EXPECT_EQ(h.arena_memory, -1);
  EXPECT_EQ(h.loss_scale_log2, -1);
  for (int64_t s = 0; s < 10; ++s) EXPECT_FALSE(h.nonfinite_at(s));
}

TEST(DebugHooks, ReadsEachHookOnce) {
  ClearHooks clean;
  setenv("FTUNE_DEBUG_EXIT_AT_MICRO_STEP", "13", 1);
  setenv("FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT", "8", 1);
  setenv("FTUNE_DEBUG_SIGTERM_AT_STEP", "5", 1);
  setenv("FTUNE_DEBUG_MICRO_BATCH_AT_STEP", "3:6", 1);
  setenv("FTUNE_DEBUG_NONFINITE_STEPS", "3,7-9,x", 1);
  setenv("FTUNE_DEBUG_OOM_AT_STEP", "2", 1);
  setenv("FTUNE_DEBUG_ARENA_MEMORY", "1000", 1);
  setenv("FTUNE_DEBUG_LOSS_SCALE", "28", 1);
  const DebugHooks h = DebugHooks::from_env();
  ClearHooks::clear();  // read once: the values stay after the environment changes
  EXPECT_EQ(h.exit_at_micro_step, 13);
  EXPECT_EQ(h.exit_after_checkpoint, 8);
  EXPECT_EQ(h.sigterm_at_step, 5);
  EXPECT_EQ(h.micro_batch_step, 3);
  EXPECT_EQ(h.micro_batch_rows, 6);
  EXPECT_EQ(h.oom_at_step, 2);
  EXPECT_FALSE(h.oom_after_backward);
  EXPECT_EQ(h.arena_memory, 1000);
  EXPECT_EQ(h.loss_scale_log2, 28);
  const bool expect[] = {false, false, false, true, false, false, false, true, true, true, false};
  for (int64_t s = 0; s < 11; ++s) EXPECT_EQ(h.nonfinite_at(s), expect[s]) << s;
}

TEST(DebugHooks, OutOfMemoryAfterTheLastBackward) {
  ClearHooks clean;
  setenv("FTUNE_DEBUG_OOM_AT_STEP", "3:backward", 1);
  const DebugHooks h = DebugHooks::from_env();
  EXPECT_EQ(h.oom_at_step, 3);
  EXPECT_TRUE(h.oom_after_backward);
}

TEST(DebugHooks, UnreadableMicroBatchChangeIsOff) {
  ClearHooks clean;
  setenv("FTUNE_DEBUG_MICRO_BATCH_AT_STEP", "3", 1);
  const DebugHooks h = DebugHooks::from_env();
  EXPECT_EQ(h.micro_batch_step, -1);
  EXPECT_EQ(h.micro_batch_rows, 0);
}

}  // namespace
}  // namespace ftune
