// The memory plan of a configured run (see batch_plan.h).
#include "train/batch_plan.h"

#include <fmt/format.h>

#include "ops/attention_cudnn.h"
#include "train/precision.h"

namespace ftune {

RunBatchPlan plan_run_batch(const TrainConfig& cfg, const EncoderConfig& model,
                            const TrainData& data, int64_t max_length,
                            const BatchPlanOptions& options) {
  const auto& tc = cfg.training;
  RunBatchPlan p;
  int64_t max_seq = data.train.longest;
  if (data.validation) max_seq = std::max(max_seq, data.validation->longest);
  if (data.test) max_seq = std::max(max_seq, data.test->longest);
  if (tc.plan_lengths == "max_length") max_seq = std::max(max_seq, max_length);
  p.target = PlanTarget{model, cfg.peft, max_seq, cfg.eval.batch_size, options.device};
  p.precision = resolve_precision(tc.precision, options.device);
  p.target.precision = compute_dtype(p.precision.precision);
  // Before planning: cuDNN attention adds its workspace to the plan (ops/attention_cudnn.h).
  p.attention = resolve_attention(tc.attention, options.device, p.precision.precision);
  set_attention_kernel(p.attention.kernel);
  if (options.device_memory) {
    p.memory = DeviceMemoryInfo{*options.device_memory, *options.device_memory, "--memory"};
  } else {
    p.memory = device_memory_info(options.device);
  }
  p.request.effective_batch = cfg.effective_batch();
  p.request.micro_batch = options.micro_batch.value_or(tc.batch_size);
  p.request.checkpointing = options.checkpointing.value_or(tc.gradient_checkpointing);
  if (tc.memory_budget.empty()) {
    p.request.budget =
        static_cast<size_t>(static_cast<double>(p.memory.available) * tc.memory_fraction);
    p.budget_source = fmt::format("training.memory_fraction {:g}", tc.memory_fraction);
  } else {
    p.request.budget = parse_bytes(tc.memory_budget, "training.memory_budget");
    p.budget_source = "training.memory_budget";
  }
  p.choice = choose_batch(p.target, p.request);
  return p;
}

}  // namespace ftune
