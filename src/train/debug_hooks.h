// Fault injection for the tests, read from the environment once when a run starts (never in the
// step loop): each hook makes a run fail or change the way a real one would, at a chosen point.
//   FTUNE_DEBUG_EXIT_AT_MICRO_STEP=m     ends the process like kill -9 just before micro-batch m
//                                        (counted over the run)
//   FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT=s  ends it so right after the checkpoint of step s is saved
//   FTUNE_DEBUG_SIGTERM_AT_STEP=s        sends SIGTERM to itself after optimizer step s
//   FTUNE_DEBUG_STOP_DELAY_MS=ms         a stop (signal or stop file) waits ms before its
//                                        checkpoint, as a large model's checkpoint write would
//   FTUNE_DEBUG_MICRO_BATCH_AT_STEP=s:m  micro-batches of m rows from optimizer step s on, as the
//                                        out-of-memory fallback would switch
//   FTUNE_DEBUG_NONFINITE_STEPS=list     the loss of these optimizer steps (1-based; "3", "3,7",
//                                        "4-6") is made NaN on the device, as a diverging step's
//   FTUNE_DEBUG_OOM_AT_STEP=s            an allocation "fails" inside optimizer step s (1-based),
//                                        once, after the first micro-batch's forward pass;
//                                        s:backward: after the step's last backward instead (a
//                                        data-parallel rank has started its gradient buckets)
//   FTUNE_DEBUG_ARENA_MEMORY=bytes       the arena may take at most that much, as if another
//                                        process held the rest of the device
//   FTUNE_DEBUG_LOSS_SCALE=s             fp16's loss scale starts at 2^s (tests force overflows)
// Within an optimizer step the hooks act at named points only (StepFaults below: a micro-batch's
// start, after its forward pass, after its backward pass; the first micro-batch's loss share),
// which the step's micro-batch passes call (train/micro_batch_pass.cc); the run loop's hooks
// (checkpoints, signals, the micro-batch switch) are at its step boundaries (train/trainer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ftune {

struct DebugHooks {
  int64_t exit_at_micro_step = -1;  // -1: off (as for every hook below)
  int64_t exit_after_checkpoint = -1;
  int64_t sigterm_at_step = -1;
  int64_t stop_delay_ms = -1;
  int64_t micro_batch_step = -1, micro_batch_rows = 0;
  std::vector<std::pair<int64_t, int64_t>> nonfinite_steps;  // inclusive ranges
  int64_t oom_at_step = -1;
  bool oom_after_backward = false;  // FTUNE_DEBUG_OOM_AT_STEP=s:backward
  int64_t arena_memory = -1;
  int64_t loss_scale_log2 = -1;

  // The hooks set in this process's environment.
  static DebugHooks from_env();
  // Whether optimizer step `step` (1-based) gets a NaN loss.
  bool nonfinite_at(int64_t step) const;
};

// The hooks' faults in one optimizer step, at the points where the step's micro-batch passes
// consult them. `step` is 0-based; `may_fail_allocation`: the run has not fallen back to a
// smaller micro-batch yet (the injected allocation failure happens once).
class StepFaults {
 public:
  StepFaults(const DebugHooks& hooks, int64_t step, bool may_fail_allocation);

  // FTUNE_DEBUG_NONFINITE_STEPS: the step's loss is NaN (its first micro-batch's loss share).
  bool nonfinite_loss() const { return nonfinite_loss_; }
  // Point "micro-batch start", after `run_micro_batches` forward passes of the run:
  // FTUNE_DEBUG_EXIT_AT_MICRO_STEP ends the process here as kill -9 would.
  void at_micro_batch_start(int64_t run_micro_batches) const;
  // Whether micro-batch `cut` (0-based) of the step's `cuts` fails an allocation
  // (FTUNE_DEBUG_OOM_AT_STEP: the first, or with :backward the last). It runs eagerly: a replayed
  // CUDA graph runs no host code.
  bool fails_allocation(size_t cut, size_t cuts) const;
  // Points "after forward" and "after backward" of a micro-batch that fails_allocation(): the
  // injected OutOfMemoryError is thrown at the chosen one.
  void after_forward(bool failing) const;
  void after_backward(bool failing) const;

 private:
  const DebugHooks& hooks_;
  bool nonfinite_loss_ = false;
  bool fails_allocation_ = false;  // in this step, at one of its micro-batches
};

// Ends the process as kill -9 would (exit status 137), after flushing what was written so far.
[[noreturn]] void exit_as_killed();

}  // namespace ftune
