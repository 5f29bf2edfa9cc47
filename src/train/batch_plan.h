// The memory plan of a configured run: what the trainer and `ftune plan` both compute from a
// TrainConfig and its tokenized data — the longest sequence (the data's, or data.max_length for
// the worst case), the device's available memory, the budget (training.memory_fraction of it, or
// training.memory_budget) and the micro-batch / accumulation / checkpointing choice
// (train/memory_planner.h).
#pragma once

#include <optional>

#include "core/memory.h"
#include "train/host_reserve.h"
#include "train/memory_planner.h"
#include "train/precision.h"
#include "train/train_config.h"
#include "train/train_data.h"

namespace ftune {

struct RunBatchPlan {
  PlanTarget target;
  DeviceMemoryInfo memory;  // what the device reported (or --memory)
  BatchRequest request;
  BatchChoice choice;
  std::string budget_source;  // "training.memory_fraction 0.95" or "training.memory_budget"
  ResolvedPrecision precision;  // training.precision resolved for the device (target.precision)
  ResolvedAttention attention;  // training.attention, passed to the model (one channel)
  // CPU runs under memory_fraction: what the margin holds outside the arena (host_reserve.h).
  std::optional<HostReserve> host;
};

struct BatchPlanOptions {
  Device device = Device::cpu();
  std::optional<size_t> device_memory;  // plan for this much available memory instead
  // Resuming: the micro-batch and checkpointing of the run being continued.
  std::optional<int64_t> micro_batch;
  std::optional<GradientCheckpointing> checkpointing;
};

// `model` has the task's labels; `max_length` is data.max_length clipped to the model.
RunBatchPlan plan_run_batch(const TrainConfig& config, const EncoderConfig& model,
                            const TrainData& data, int64_t max_length,
                            const BatchPlanOptions& options = {});

}  // namespace ftune
