// The memory plan of a configured run: what the trainer and `ftune plan` both compute from a
// TrainConfig and its tokenized data — the longest sequence (the data's, or data.max_length for
// the worst case), the device's available memory, the budget (training.memory_fraction of it, or
// training.memory_budget) and the micro-batch / accumulation / checkpointing choice
// (train/memory_planner.h), and whether micro-batches are packed (data.packing). Each candidate
// micro-batch is planned for the largest micro-batch of the run it would cut, evaluation included
// (train/run_micro_batches.h; training.plan_lengths max_length plans rows x data.max_length).
#pragma once

#include <optional>

#include "core/memory.h"
#include "train/host_reserve.h"
#include "train/memory_planner.h"
#include "train/precision.h"
#include "train/train_config.h"
#include "train/train_data.h"

namespace ftune {

// data.packing resolved: packed micro-batches need a family that supports them (on is an error
// elsewhere). auto packs there, except on a CUDA run whose step is captured in CUDA graphs
// (`cuda_graphs`: training.cuda_graphs resolved): a graph replays fixed shapes and packed
// micro-batches vary in tokens and rows, so they would run eagerly; until packed graphs keyed by
// token budget land, auto keeps the graphs and pads there (on packs anyway, graphs then capture
// only padded micro-batches: evaluation's).
struct ResolvedPacking {
  bool on = false;
  std::string why;
};
ResolvedPacking resolve_packing(Switch value, const ModelInfo& model, Device device,
                                bool cuda_graphs);
// The same from the key's word (auto, on or off; else InputError naming data.packing).
ResolvedPacking resolve_packing(std::string_view value, const ModelInfo& model, Device device,
                                bool cuda_graphs);

struct RunBatchPlan {
  PlanTarget target;
  DeviceMemoryInfo memory;  // what the device reported (or --memory)
  BatchRequest request;
  BatchChoice choice;
  std::string budget_source;  // "training.memory_fraction 0.95" or "training.memory_budget"
  ResolvedPrecision precision;  // training.precision resolved for the device (target.precision)
  ResolvedAttention attention;  // training.attention (the trainer sets it: ops/backend_context.h)
  ResolvedPacking packing;      // data.packing (target.packed)
  // CPU runs under memory_fraction: what the margin holds outside the arena (host_reserve.h).
  std::optional<HostReserve> host;
};

struct BatchPlanOptions {
  Device device = Device::cpu();
  std::optional<size_t> device_memory;  // plan for this much available memory instead
  // Resuming: the micro-batch and checkpointing of the run being continued.
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> micro_tokens;  // packed: the token budget (0: none recorded)
  std::optional<GradientCheckpointing> checkpointing;
  // Data-parallel runs: each of `ranks` computes at most ceil(effective / ranks) rows of a step
  // (listwise / margin_mse: ceil(effective / ranks) whole groups);
  // on the CPU the `local_ranks` ranks of one machine share its memory.
  int64_t ranks = 1, local_ranks = 1;
  // Plan for the largest micro-batch of the configured run (train/run_micro_batches.h); false
  // plans rows x the longest sequence, for callers that step through batches of their own
  // (`ftune bench`).
  bool plan_for_run = true;
};

// `model` has the task's labels; `max_length` is data.max_length clipped to the model.
RunBatchPlan plan_run_batch(const TrainConfig& config, const ModelSpec& model,
                            const TrainData& data, int64_t max_length,
                            const BatchPlanOptions& options = {});

}  // namespace ftune
