// Fault-injection hooks read from the environment (see debug_hooks.h).
#include "train/debug_hooks.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace ftune {
namespace {

int64_t env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : -1;
}

// "3", "3,7", "4-6": inclusive ranges of steps; unreadable items are ignored.
std::vector<std::pair<int64_t, int64_t>> env_ranges(const char* name) {
  std::vector<std::pair<int64_t, int64_t>> r;
  const char* v = std::getenv(name);
  const std::string text = v ? v : "";
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    long long a = 0, b = 0;
    if (std::sscanf(item.c_str(), "%lld-%lld", &a, &b) == 2)
      r.push_back({a, b});
    else if (std::sscanf(item.c_str(), "%lld", &a) == 1)
      r.push_back({a, a});
    at = end + 1;
  }
  return r;
}

}  // namespace

DebugHooks DebugHooks::from_env() {
  DebugHooks h;
  h.exit_at_micro_step = env_int("FTUNE_DEBUG_EXIT_AT_MICRO_STEP");
  h.exit_after_checkpoint = env_int("FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT");
  h.sigterm_at_step = env_int("FTUNE_DEBUG_SIGTERM_AT_STEP");
  h.stop_delay_ms = env_int("FTUNE_DEBUG_STOP_DELAY_MS");
  if (const char* v = std::getenv("FTUNE_DEBUG_MICRO_BATCH_AT_STEP")) {
    long long step = -1, rows = 0;
    if (std::sscanf(v, "%lld:%lld", &step, &rows) == 2) {
      h.micro_batch_step = step;
      h.micro_batch_rows = rows;
    }
  }
  h.nonfinite_steps = env_ranges("FTUNE_DEBUG_NONFINITE_STEPS");
  h.oom_at_step = env_int("FTUNE_DEBUG_OOM_AT_STEP");
  if (const char* v = std::getenv("FTUNE_DEBUG_OOM_AT_STEP"))
    h.oom_after_backward = std::string(v).find(":backward") != std::string::npos;
  h.arena_memory = env_int("FTUNE_DEBUG_ARENA_MEMORY");
  h.loss_scale_log2 = env_int("FTUNE_DEBUG_LOSS_SCALE");
  return h;
}

bool DebugHooks::nonfinite_at(int64_t step) const {
  for (const auto& [a, b] : nonfinite_steps)
    if (step >= a && step <= b) return true;
  return false;
}

StepFaults::StepFaults(const DebugHooks& hooks, int64_t step, bool may_fail_allocation)
    : hooks_(hooks),
      nonfinite_loss_(hooks.nonfinite_at(step + 1)),
      fails_allocation_(step + 1 == hooks.oom_at_step && may_fail_allocation) {}

void StepFaults::at_micro_batch_start(int64_t run_micro_batches) const {
  if (run_micro_batches == hooks_.exit_at_micro_step) exit_as_killed();
}

bool StepFaults::fails_allocation(size_t cut, size_t cuts) const {
  return fails_allocation_ && (hooks_.oom_after_backward ? cut + 1 == cuts : cut == 0);
}

void StepFaults::after_forward(bool failing) const {
  if (failing && !hooks_.oom_after_backward)
    throw OutOfMemoryError("FTUNE_DEBUG_OOM_AT_STEP: injected allocation failure");
}

void StepFaults::after_backward(bool failing) const {
  if (failing && hooks_.oom_after_backward)
    throw OutOfMemoryError(
        "FTUNE_DEBUG_OOM_AT_STEP: injected allocation failure after the last backward");
}

void exit_as_killed() {
  std::fflush(nullptr);
  _exit(137);
}

}  // namespace ftune
