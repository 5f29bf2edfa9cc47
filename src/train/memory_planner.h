// The memory planner: the bytes a training run needs, by category, and the largest micro-batch
// that fits a budget — computed, not found by running out of memory.
//
// The plan is the run's arena plan itself (the model's and the optimizer's add_to_plan), so the
// planned peak IS what the trainer allocates: one block, nothing allocated in the step loop. A
// plan is cheap to build (no memory is touched), so "the largest micro-batch that fits" is an
// exact binary search over plans: plan(m) <= budget < plan(m + 1).
//
// Sizes follow from (model, adapters, micro-batch rows — or, with packed batches, tokens —,
// longest sequence, gradient checkpointing, optimizer). In a run they are those of the run's
// largest micro-batch: every split is tokenized and the batch order is deterministic, so the
// planner walks the micro-batches a candidate micro-batch would cut, evaluation included
// (PlanTarget::run, train/run_micro_batches.h), and the plan is what the run touches. Without a
// run, a micro-batch is planned for rows x the longest sequence of the data (packed: its token
// budget); planning for data.max_length instead is the worst case (`training.plan_lengths:
// max_length`, which also plans rows x max_length in a run).
//
// Budget: the device's available memory (device_memory_info: /proc/meminfo or the cgroup on the
// CPU, cudaMemGetInfo on a GPU) times training.memory_fraction (default 0.95), or
// training.memory_budget when given. The arena is the only large allocation of a run, so the
// margin only has to cover what lives outside it (the CUDA context and library handles, the
// tokenized data and the host side of the run).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "models/adapter_config.h"
#include "models/backbone.h"
#include "models/sequence_classifier.h"
#include "train/run_micro_batches.h"

namespace ftune {

// What is being planned for: a model with its task head, adapters and the longest sequence.
// Packed batches (data.packing) size a micro-batch in tokens rather than rows: every function
// below that takes a micro-batch then takes its token budget (at least max_seq, so the longest row
// fits), and its rows are bounded by packed_rows().
struct PlanTarget {
  ModelSpec model;  // with the task's labels
  AdapterConfig adapters;
  int64_t max_seq = 128;   // longest sequence (tokens, special tokens included)
  int64_t eval_batch = 0;  // rows of an evaluation batch; 0: the micro-batch
  Device device = Device::cpu();
  DType precision = DType::F32;  // GEMM activations and weight shadow (train/precision.h)
  // training.attention resolved: cuDNN (on a GPU, 16-bit) plans its softmax statistics per layer
  // instead of the (B, H, T, T) probabilities (ops/attention_cudnn.h).
  AttentionKernel attention = AttentionKernel::Ftune;
  bool packed = false;      // micro-batches are token budgets of packed rows
  int64_t shortest = 1;     // packed: the shortest row (bounds the rows of a budget)
  int64_t max_rows = 0;     // packed: rows of a micro-batch at most (the effective batch); 0: none
  // The run's micro-batches (train/run_micro_batches.h): with them a micro-batch is planned for
  // the largest micro-batch of the run it cuts, evaluation included; without (a model planned
  // apart from a run), for rows x max_seq (packed: its token budget).
  std::shared_ptr<const RunMicroBatches> run = nullptr;
  // The batches carry float targets (a score task: train/score_task.h), which the input staging
  // then holds room for (K per row); a class-label task stages none.
  bool float_targets = true;

  // The smallest micro-batch: one row, or (packed) the tokens of the longest row.
  int64_t min_micro_batch() const { return packed ? max_seq : 1; }
};

// Rows a packed micro-batch of `tokens` tokens may hold: tokens / shortest row, at most max_rows
// and at least one.
int64_t packed_rows(const PlanTarget& target, int64_t tokens);

// How a run with micro-batch `micro_batch` (rows, or packed its token budget) cuts its training
// and evaluation batches: padded, micro-batches of micro_batch rows and evaluation batches of
// eval_batch (0: micro_batch); packed, at most packed_rows() rows and micro_batch tokens, both.
RunCut run_cut(const PlanTarget& target, int64_t micro_batch);
// The largest micro-batch of the run `micro_batch` cuts (target.run), or none without a run.
std::optional<RunShape> largest_in_run(const PlanTarget& target, int64_t micro_batch);

struct MemoryCategory {
  std::string name;  // "parameters", "gradients", ...
  size_t bytes = 0;
  std::string note;  // what it holds
};

struct MemoryPlan {
  int64_t micro_batch = 0;  // rows, or (packed) tokens
  int64_t rows = 0;  // rows the activations are planned for: max(micro-batch, eval batch)
  int64_t max_seq = 0;
  GradientCheckpointing checkpointing = GradientCheckpointing::Off;
  // Planned for the run's largest micro-batch (rows, tokens, longest row above are its), when
  // the target has the run's micro-batches.
  std::optional<RunShape> planned_for;
  std::vector<MemoryCategory> categories;  // fixed order; their sum is total
  size_t arena = 0;  // the arena's size: everything but the GEMM workspace
  size_t total = 0;  // the run's planned peak: the arena plus, on a GPU, the cuBLASLt workspace

  // The category a planned buffer belongs to (by its name: "act/layer0/probs" -> attention).
  static const char* category_of(const std::string& buffer_name);
  static MemoryPlan from(const ArenaPlan& plan, Device device = Device::cpu());
};

// The classifier options of a training run with `micro_batch` rows (packed: tokens) per
// micro-batch: what the planner plans and the trainer builds (padded rows: max(micro-batch,
// evaluation batch); packed evaluation batches are cut to the same budget). Its inputs come
// through the run's input staging (no own inputs).
ClassifierOptions training_classifier_options(const PlanTarget& target, int64_t micro_batch,
                                              GradientCheckpointing checkpointing);

// Float targets per row the run's input staging holds: the head's K for a score task, else 0.
int64_t staged_target_width(const PlanTarget& target);

// The arena plan of a training run with `micro_batch` rows per micro-batch (checkpointing Off or
// On): the model's buffers (SequenceClassifier::add_to_plan) and AdamW's moments.
ArenaPlan training_arena_plan(const PlanTarget& target, int64_t micro_batch,
                              GradientCheckpointing checkpointing);
MemoryPlan plan_memory(const PlanTarget& target, int64_t micro_batch,
                       GradientCheckpointing checkpointing);

// The largest micro-batch m in [min_micro_batch(), cap] whose plan fits in `budget` bytes; 0 when
// even the smallest does not fit.
int64_t largest_micro_batch(const PlanTarget& target, GradientCheckpointing checkpointing,
                            size_t budget, int64_t cap);

// Micro-batch, accumulation and checkpointing for an effective batch.
struct BatchRequest {
  int64_t effective_batch = 32;
  int64_t micro_batch = 0;  // rows; 0: auto (the largest that fits); else fixed by the user
  GradientCheckpointing checkpointing = GradientCheckpointing::Auto;
  size_t budget = 0;
  int64_t micro_tokens = 0;  // packed, with a fixed micro_batch: its token budget (0: rows x T)
};

struct BatchChoice {
  int64_t micro_batch = 0;   // rows of a micro-batch (packed: at most)
  int64_t micro_tokens = 0;  // packed: the token budget of a micro-batch; 0 padded
  int64_t accumulation = 1;
  int64_t effective_batch = 0;
  GradientCheckpointing checkpointing = GradientCheckpointing::Off;
  int64_t fits_without_checkpointing = 0;  // largest micro-batch in budget (capped at effective)
  int64_t fits_with_checkpointing = 0;
  size_t budget = 0;
  size_t planned_bytes = 0;  // the plan of the choice
  bool over_budget = false;  // a fixed micro-batch the budget cannot hold (the run still tries)
  std::string reason;        // one line for the log: why this micro-batch and checkpointing
};

// Throws InputError when auto cannot fit even one row (naming the budget and what one row needs).
// Packed: auto is the largest token budget (up to the effective batch of longest rows) and its
// accumulation the micro-batches that budget needs at worst; a fixed batch_size m packs m rows
// (a budget of m longest rows, the same cut as padded).
// Accumulation is the fewest steps that reach the effective batch, and the micro-batch the
// smallest that reaches it in that many steps (32 in budget 27 -> 2 x 16), so micro-batches are
// as even as possible. With checkpointing Auto it turns on only when that reduces accumulation
// (or is the only way a fixed micro-batch fits).
BatchChoice choose_batch(const PlanTarget& target, const BatchRequest& request);

// Steps of accumulation and micro-batch rows for an effective batch given the largest micro-batch
// that fits: accumulation = ceil(effective / fit), micro = ceil(effective / accumulation).
std::pair<int64_t, int64_t> split_effective_batch(int64_t effective, int64_t fit);

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(size_t bytes);
// Parses "8GiB", "512MiB", "2.5GB", "1000000" (bytes); InputError naming `key` otherwise.
size_t parse_bytes(const std::string& text, const std::string& key);

}  // namespace ftune
