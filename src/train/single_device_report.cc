// summary.json's fields about how a single-device run's steps ran (SingleDeviceStep::report, see
// single_device_step.h): TF32, padding, CUDA graphs and their counts, GEMM autotune, GPU paths,
// micro-batches and accumulation, packing, checkpointing, and the arena's memory: planned per
// category, touched (CPU arenas), measured on the device, the out-of-memory retries and the
// host's share; the data-parallel reduction's report where there is one.
#include <algorithm>

#include "core/gpu_paths.h"
#include "core/memory.h"
#include "ops/backend_context.h"
#include "train/gpu_paths_report.h"
#include "train/single_device_step.h"

namespace ftune {
namespace {

// Planned bytes per category (MemoryPlan) and, on CPU arenas, the bytes really touched.
nlohmann::json memory_report(const Arena& arena, Device device) {
  const MemoryPlan plan = MemoryPlan::from(arena.plan(), device);
  nlohmann::json planned = nlohmann::json::object();
  for (const MemoryCategory& c : plan.categories) planned[c.name] = c.bytes;
  nlohmann::json j = {{"planned_bytes", arena.capacity()},
                      {"planned_total_bytes", plan.total},  // with the GEMM workspace on a GPU
                      {"planned", planned}};
  if (arena.device().is_cpu()) {
    nlohmann::json touched = nlohmann::json::object();
    size_t total = 0;
    const auto& buffers = arena.plan().buffers();
    std::vector<size_t> high_water(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
      const char* category = MemoryPlan::category_of(buffers[i].name);
      const size_t bytes = high_water[i] = arena.touched_bytes(i);
      touched[category] = touched.value(category, size_t{0}) + bytes;
      total += bytes;
    }
    j["touched_bytes"] = total;
    j["touched"] = touched;
    // Buffers the run left part of unused (planned bytes above their high-water mark): with the
    // plan made for the run's largest micro-batch, none but the few sized by more than it.
    nlohmann::json room = nlohmann::json::object();
    for (size_t i = 0; i < buffers.size(); ++i)
      if (high_water[i] < buffers[i].bytes)
        room[buffers[i].name] = {{"planned", buffers[i].bytes}, {"touched", high_water[i]}};
    j["buffers_not_filled"] = room;
  }
  return j;
}

}  // namespace

nlohmann::json SingleDeviceStep::report() const {
  nlohmann::json s;
  s["tf32"] = tf32_.on;
  s["pad_to_multiple_of"] = pad_.multiple;
  s["padding"] = pad_.describe();
  nlohmann::json g{{"on", cuda_graphs_.on}, {"why", cuda_graphs_.why}};
  if (cuda_graphs_.on && micro_tokens_ > 0) g["packed_micro_batches"] = kPackedMicroBatchesEager;
  if (graphs_) {
    const StepGraphStats& st = graphs_->stats();
    g["eager_micro_batches"] = st.eager;
    g["captured"] = st.captured;
    g["replayed"] = st.replayed;
    g["evicted"] = st.evicted;
    g["capture_seconds"] = st.capture_seconds;
    g["held"] = graphs_->graphs();
    if (!st.failure.empty()) g["failure"] = st.failure;
  }
  s["cuda_graphs"] = g;
  if (!plan_.target.device.is_cpu()) s["gemm_autotune"] = gemm_autotune_report();
  s["gpu_paths"] = gpu_paths_json(gpu_path_counts() - gpu_paths_at_start_);
  s["gradient_checkpointing"] = checkpointing_ == GradientCheckpointing::On;
  s["micro_batch"] = micro_batch_;  // in use at the end (smaller after an out-of-memory fallback)
  s["packing"] = {{"on", micro_tokens_ > 0}, {"why", plan_.packing.why}};
  if (micro_tokens_ > 0) s["micro_batch_tokens"] = micro_tokens_;
  s["gradient_accumulation"] = accumulation();
  s["arena_bytes"] = arena_->capacity();
  nlohmann::json memory = memory_report(*arena_, plan_.target.device);
  memory["device"] = device_name(plan_.target.device);
  memory["available_bytes"] = plan_.memory.available;
  memory["budget_bytes"] = plan_.choice.budget;
  memory["max_seq"] = plan_.target.max_seq;
  // The micro-batch the arena is planned for: the run's largest (train/run_micro_batches.h).
  if (const std::optional<RunShape> run = largest_in_run(plan_.target, plan_unit()))
    memory["planned_for"] = {{"rows", run->rows},
                             {"tokens", run->tokens},
                             {"longest", run->longest},
                             {"largest", run->largest.to_json()}};
  memory["largest_micro_batch"] = {{"without_checkpointing", plan_.choice.fits_without_checkpointing},
                                   {"with_checkpointing", plan_.choice.fits_with_checkpointing}};
  memory["batch_choice"] = plan_.choice.reason;
  memory["oom_retries"] = oom_retries_;
  if (plan_.host) {
    // What the plan's margin held for the process outside the arena, next to what the process
    // holds now (its anonymous memory less the arena's is what the run added outside it).
    const ProcessMemory now = process_memory();
    memory["host"] = plan_.host->to_json();
    memory["host"]["rss_anon_at_plan_bytes"] = plan_.host->at_plan.rss_anon;
    memory["host"]["rss_anon_at_end_bytes"] = now.rss_anon;
    memory["host"]["peak_rss_bytes"] = now.peak_rss;
  }
  if (!plan_.target.device.is_cpu() && free_before_run_ > 0) {
    const size_t planned = memory["planned_total_bytes"].get<size_t>();
    // Measured on the device: free memory before the arena minus the lowest free memory seen at
    // log intervals (cudaMemGetInfo), next to the plan.
    const size_t measured = free_before_run_ - std::min(free_before_run_, min_free_);
    memory["measured_device_bytes"] = measured;
    memory["measured_over_planned"] =
        static_cast<double>(measured) / static_cast<double>(planned);
  }
  s["memory"] = memory;
  if (nlohmann::json dp = sync_->report(); !dp.is_null()) s["data_parallel"] = std::move(dp);
  return s;
}

}  // namespace ftune
