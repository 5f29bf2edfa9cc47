// The fault-injection hooks (train/debug_hooks.h): read from the environment once, into values the
// step loop compares against; unset hooks are off; the non-finite step list takes single steps and
// inclusive ranges. Within a step (StepFaults) each acts at its named point only: the injected
// allocation failure in the step's first micro-batch after its forward pass, or with :backward in
// its last after its backward pass, once per run; the NaN loss in the chosen steps.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
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

TEST(StepFaults, AllocationFailsAfterTheFirstForwardOfItsStepOnce) {
  DebugHooks h;
  h.oom_at_step = 3;  // 1-based: step index 2
  h.nonfinite_steps = {{2, 2}};
  const StepFaults other(h, 0, true);
  EXPECT_FALSE(other.fails_allocation(0, 4));
  EXPECT_FALSE(other.nonfinite_loss());
  EXPECT_TRUE(StepFaults(h, 1, true).nonfinite_loss());
  const StepFaults f(h, 2, true);
  EXPECT_TRUE(f.fails_allocation(0, 4));
  EXPECT_FALSE(f.fails_allocation(1, 4));
  EXPECT_FALSE(f.fails_allocation(3, 4));
  EXPECT_THROW(f.after_forward(true), OutOfMemoryError);
  EXPECT_NO_THROW(f.after_forward(false));
  EXPECT_NO_THROW(f.after_backward(true));
  // After the run's first fallback to a smaller micro-batch, the retried step runs through.
  EXPECT_FALSE(StepFaults(h, 2, false).fails_allocation(0, 4));
}

TEST(StepFaults, AllocationFailsAfterTheLastBackwardWithBackward) {
  DebugHooks h;
  h.oom_at_step = 1;
  h.oom_after_backward = true;
  const StepFaults f(h, 0, true);
  EXPECT_FALSE(f.fails_allocation(0, 3));
  EXPECT_TRUE(f.fails_allocation(2, 3));
  EXPECT_NO_THROW(f.after_forward(true));
  EXPECT_THROW(f.after_backward(true), OutOfMemoryError);
  EXPECT_NO_THROW(f.after_backward(false));
  EXPECT_TRUE(StepFaults(h, 0, true).fails_allocation(0, 1));  // one micro-batch: it is the last
}

}  // namespace
}  // namespace ftune
