// The memory plan of a configured run (see batch_plan.h).
#include "train/batch_plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/device.h"
#include "core/thread_pool.h"
#include "cuda/cuda_libraries.h"
#include "ops/attention_cudnn.h"
#include "train/precision.h"
#include "train/step_graphs.h"

namespace ftune {

ResolvedPacking resolve_packing(std::string_view value, const ModelInfo& model, Device device,
                                bool cuda_graphs) {
  return resolve_packing(parse_choice<Switch>(value, "key 'data.packing'"), model, device,
                         cuda_graphs);
}

ResolvedPacking resolve_packing(Switch value, const ModelInfo& model, Device device,
                                bool cuda_graphs) {
  if (value == Switch::Off) return {false, "data.packing off"};
  // The CPU and CUDA run packed batches alike (the ops read cu_seqlens on the device).
  std::string refused;
  if (!model.packing)
    refused = fmt::format("{} has no packed (padding-free) path", model.architecture);
  if (value == Switch::On && !refused.empty())
    throw InputError(fmt::format("data.packing on: {}; set data.packing to auto or off", refused));
  if (!refused.empty()) return {false, "data.packing auto: " + refused};
  if (value == Switch::Auto && !device.is_cpu() && cuda_graphs)
    return {false,
            "data.packing auto: padded, so that CUDA graphs capture the step (packed micro-batches "
            "vary in tokens and rows and would run eagerly); data.packing on packs without graphs"};
  // Packed micro-batches compute no padding and cost as much CPU time per step as length-bucketed
  // padded ones on the main job's data (-3.6% and +0.3% in two replicates:
  // bench/results/packing.md), so auto packs where the family and the device can.
  return {true, fmt::format("data.packing {}", choice_name(value))};
}

// Listwise: a micro-batch holds whole groups, so its rows are rounded down to a multiple of the
// group size (InputError when one group does not fit), and the accumulation follows.
static void align_to_groups(BatchChoice& c, int64_t group_size) {
  if (c.micro_batch < group_size)
    throw InputError(fmt::format(
        "training.loss listwise / margin_mse: one group of {} rows (data.group_size) does not fit "
        "the memory "
        "budget ({} rows do); lower data.group_size or data.max_length",
        group_size, c.micro_batch));
  c.micro_batch -= c.micro_batch % group_size;
  if (c.micro_tokens == 0) c.accumulation = (c.effective_batch + c.micro_batch - 1) / c.micro_batch;
  c.reason += fmt::format(" (whole groups of {} rows)", group_size);
}

// The plan of a choice (after align_to_groups changed its micro-batch).
static size_t planned_bytes(const PlanTarget& target, const BatchChoice& c) {
  return plan_memory(target, target.packed ? c.micro_tokens : c.micro_batch, c.checkpointing).total;
}

RunBatchPlan plan_run_batch(const TrainConfig& cfg, const ModelSpec& model_spec,
                            const TrainData& data, int64_t max_length,
                            const BatchPlanOptions& options) {
  const auto& tc = cfg.training;
  const ModelInfo& model = model_spec.info();
  RunBatchPlan p;
  int64_t max_seq = data.train.longest, shortest = data.train.shortest;
  if (data.validation) max_seq = std::max(max_seq, data.validation->longest);
  if (data.test) max_seq = std::max(max_seq, data.test->longest);
  if (data.validation) shortest = std::min(shortest, data.validation->shortest);
  if (data.test) shortest = std::min(shortest, data.test->shortest);
  if (tc.plan_lengths == PlanLengths::MaxLength) max_seq = std::max(max_seq, max_length);
  p.target = PlanTarget{model_spec, cfg.peft, max_seq, cfg.eval.batch_size, options.device};
  p.packing = resolve_packing(cfg.data.packing, model, options.device,
                              resolve_cuda_graphs(tc.cuda_graphs, options.device).on);
  p.target.packed = p.packing.on;
  p.target.float_targets = data.task.scores();
  p.target.shortest = std::max<int64_t>(1, shortest);
  // Every split is tokenized and the batch order is known: each micro-batch is planned for the
  // largest micro-batch of the run it cuts (train/run_micro_batches.h), unless the plan is asked
  // for data.max_length (the worst case, rows x max_length).
  if (options.plan_for_run && tc.plan_lengths != PlanLengths::MaxLength)
    p.target.run = std::make_shared<const RunMicroBatches>(
        cfg, data, std::max<int64_t>(1, options.ranks),
        resolve_padding(tc.pad_to_multiple_of, options.device), max_seq);
  // A data-parallel rank's share of the step batch (the whole of it on one device).
  const int64_t ranks = std::max<int64_t>(1, options.ranks);
  // Listwise: batch sizes count groups; the plan is in rows (groups x data.group_size). Ranks
  // get whole groups (dist/gradient_reducer.h): the most any rank computes is ceil(groups /
  // ranks) groups.
  const int64_t unit = data.task.grouped() ? cfg.data.group_size : 1;
  const int64_t rank_batch = (cfg.effective_batch() + ranks - 1) / ranks * unit;
  const int64_t fixed_micro = tc.batch_size * unit;
  p.target.max_rows = fixed_micro > 0 ? std::min(fixed_micro, rank_batch) : rank_batch;
  p.precision = resolve_precision(tc.precision, options.device);
  p.target.precision = compute_dtype(p.precision.precision);
  // Before planning: with cuDNN attention each layer plans its softmax statistics instead of
  // the probabilities, plus cuDNN's workspace (ops/attention_cudnn.h).
  p.attention = resolve_attention(tc.attention, options.device, p.precision.precision);
  p.target.attention = p.attention.kernel;
  if (options.device_memory) {
    p.memory = DeviceMemoryInfo{*options.device_memory, *options.device_memory, "--memory"};
  } else {
    p.memory = device_memory_info(options.device);
  }
  if (options.device.is_cpu() && options.local_ranks > 1) {  // the machine's memory, shared
    p.memory.available /= static_cast<size_t>(options.local_ranks);
    p.memory.source += fmt::format(", shared by {} ranks", options.local_ranks);
  }
  p.request.effective_batch = rank_batch;
  p.request.micro_batch = options.micro_batch.value_or(
      fixed_micro > 0 ? std::min(fixed_micro, rank_batch) : tc.batch_size);
  p.request.micro_tokens = options.micro_tokens.value_or(0);
  p.request.checkpointing = options.checkpointing.value_or(tc.gradient_checkpointing);
  if (tc.memory_budget.empty()) {
    p.request.budget =
        static_cast<size_t>(static_cast<double>(p.memory.available) * tc.memory_fraction);
    p.budget_source = fmt::format("training.memory_fraction {:g}", tc.memory_fraction);
    if (options.device.is_cpu() && !options.device_memory) {
      // The process itself, and what the run adds outside the arena (host_reserve.h).
      const size_t prefetch = static_cast<size_t>(tc.prefetch * cfg.effective_batch() * max_seq) *
                              4 * sizeof(int32_t);  // ids, types, mask, positions
      p.host = host_reserve(p.memory, process_memory(), compute_threads(), prefetch);
      const size_t budget = cpu_budget(p.memory.available, tc.memory_fraction, p.host->total());
      if (budget < p.request.budget) {
        p.request.budget = budget;
        p.budget_source = fmt::format(
            "the available memory less {} for the process outside the arena (its {} of mapped "
            "files, {} the run adds later; training.memory_fraction {:g} would leave less)",
            format_bytes(p.host->total()), format_bytes(p.host->unaccounted_rss),
            format_bytes(p.host->after_plan), tc.memory_fraction);
      }
    }
  } else {
    p.request.budget = parse_bytes(tc.memory_budget, "training.memory_budget");
    p.budget_source = "training.memory_budget";
  }
  p.choice = choose_batch(p.target, p.request);
  if (unit > 1 && p.target.packed && p.choice.micro_tokens < unit * max_seq) {
    // Packed listwise micro-batches hold whole groups: the token budget must take one group of
    // the longest rows, else the micro-batches are padded.
    p.packing = {false, fmt::format("training.loss listwise: a token budget of {} cannot hold a "
                                    "group of {} rows of {} tokens; padded micro-batches",
                                    p.choice.micro_tokens, unit, max_seq)};
    p.target.packed = false;
    p.choice = choose_batch(p.target, p.request);
  }
  if (unit > 1) {
    align_to_groups(p.choice, unit);
    p.choice.planned_bytes = planned_bytes(p.target, p.choice);
  }
  // The plan's largest attention (its rows x the longest sequence, training dropout and
  // evaluation) goes to cuDNN now, where the GPU is here: a refusal later could find no room for
  // ftune's kernel in the small buffer. Refused: ftune's kernel for the whole run, planned again.
  const bool cudnn = uses_cudnn_attention(p.attention.kernel, p.target.device, p.target.precision);
  if (cudnn && p.target.device.index < cuda_device_count()) {
    const int64_t rows = std::max(p.choice.micro_batch, p.target.eval_batch);
    // Packed: cuDNN's ragged layout for up to the plan's rows (cuda/cudnn_attention.h).
    const std::string why =
        cudnn_attention_probe(p.target.device, rows, p.target.max_seq, model.num_heads, model.head_dim,
                              p.target.precision, model.attention_dropout, p.target.packed);
    if (!why.empty()) {
      cuda::fail_if_cudnn_required(
          fmt::format("training.attention {}: cuDNN refused the run's largest attention (B={} "
                      "T={} H={} D={})",
                      choice_name(tc.attention), rows, p.target.max_seq, model.num_heads,
                      model.head_dim),
          why);
      spdlog::warn(
          "training.attention {}: cuDNN cannot run this run's largest attention (B={} T={} H={} "
          "D={}{}: {}); ftune's kernel runs the whole run, with the (B, H, T, T) probabilities "
          "planned",
          choice_name(tc.attention), rows, p.target.max_seq, model.num_heads, model.head_dim,
          p.target.packed ? ", packed rows" : "", why);
      p.attention = {AttentionKernel::Ftune,
                     fmt::format("training.attention {}, but cuDNN refused the run's largest "
                                 "attention ({})",
                                 choice_name(tc.attention), why)};
      p.target.attention = p.attention.kernel;
      p.choice = choose_batch(p.target, p.request);
      if (unit > 1) {
        align_to_groups(p.choice, unit);
        p.choice.planned_bytes = planned_bytes(p.target, p.choice);
      }
    }
  }
  return p;
}

}  // namespace ftune
