// Per-op time of one training step (env FTUNE_PROFILE_OPS=1): where a step's time goes, op by op.
//
// Every op's dispatch point (ops/dispatch.h) and the GEMM entries open an OpScope. While a step is
// being recorded (StepRecorder), each scope is timed: with two CUDA events on the compute stream
// on a GPU (device time from the op's first kernel to its last, read after the step), with the
// host clock on the CPU (whose ops are synchronous). A scope opened inside another one (the GEMM
// of a linear layer) is reported under "outer > inner", and the outer op keeps only its own time
// (exclusive time), so the rows add up. What the rows do not cover is the gap: step time minus the
// ops' sum = kernel-launch gaps, host waits (the input batch, staging) and work outside any op
// (memsets, copies). Outside the recorded step a scope costs one relaxed atomic load.
//
// The profiled step is FTUNE_PROFILE_STEP (1-based optimizer step, default 3: after the first
// steps picked their cuBLASLt algorithms), or the run's last step if it has fewer. CUDA graphs
// are turned off for a profiled run (train/step_graphs.h): a replayed graph has no per-op
// launches to time, so the table shows eager launches and the gap is that of an eager step.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/device.h"

namespace ftune::profile {

bool ops_enabled();  // FTUNE_PROFILE_OPS is set to something other than "" or "0"

// Times the op `name` (a string literal: kept by pointer) while a step is being recorded.
class OpScope {
 public:
  OpScope(const char* name, Device device);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  int index_ = -1;  // the entry being timed, -1 when not recording
};

struct OpRow {
  std::string name;  // "layer_norm_forward", or "linear_forward > gemm" for a nested scope
  double ms = 0;     // exclusive time, summed over the calls
  int64_t calls = 0;
};

struct StepProfile {
  int64_t step = 0;  // 1-based optimizer step
  std::string device;
  std::string clock;  // "CUDA events" or "host clock"
  double step_ms = 0;       // begin() to finish(): on a GPU the compute stream's span
  double host_step_ms = 0;  // the same on the host clock, the final synchronisation included
  std::vector<OpRow> ops;   // largest first
  double ops_ms = 0;        // the rows' sum
  double gap_ms = 0;        // step_ms - ops_ms
  nlohmann::json to_json() const;
  std::string table(size_t max_rows = 40) const;  // the printed table
};

// Records one optimizer step when ops_enabled() and `step` is the profiled one of `total_steps`;
// otherwise does nothing. Construct before the step, call finish() after it; a step abandoned by
// an exception stops the recording in the destructor.
class StepRecorder {
 public:
  StepRecorder(int64_t step, int64_t total_steps, Device device);
  // Records step `step` whatever the environment says (tests; tools that time one step).
  static StepRecorder always(int64_t step, Device device);
  ~StepRecorder();
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;
  bool active() const { return active_; }
  // Synchronises the device, stops recording and returns the profile (active() only).
  StepProfile finish();

 private:
  StepRecorder(int64_t step, Device device, bool record);
  bool active_ = false;
  int64_t step_ = 0;
  Device device_;
};

// The profiled step of a run of `total_steps` (FTUNE_PROFILE_STEP, default 3, clamped to it).
int64_t profiled_step(int64_t total_steps);

}  // namespace ftune::profile
