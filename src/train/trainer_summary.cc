// The run's summary.json (see trainer_run.h): status, model and data, how steps ran (the step
// strategy's report: precision settings, micro-batches, CUDA graphs, memory planned / touched /
// measured), throughput and input wait, FLOPs and MFU, peak memory, host reads of device scalars,
// and the best and final evaluations.
#include <sys/resource.h>

#include "core/memory.h"
#include "core/thread_pool.h"
#include "ops/backend_context.h"
#include "train/trainer_run.h"

namespace ftune {
namespace {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace

TrainingWork Trainer::work_over_ranks() const {
  TrainingWork w = strategy_->work();
  if (!group_->distributed()) return w;
  // Counts below 2^53 add exactly as doubles.
  double v[] = {double(w.sequences), double(w.padded_tokens), double(w.real_tokens),
                w.padded_flops, w.real_flops};
  group_->sum(v, 5);
  w.sequences = static_cast<int64_t>(v[0]);
  w.padded_tokens = static_cast<int64_t>(v[1]);
  w.real_tokens = static_cast<int64_t>(v[2]);
  w.padded_flops = v[3];
  w.real_flops = v[4];
  return w;
}

nlohmann::json Trainer::summary(const std::string& status, const TrainingWork& work) const {
  nlohmann::json s;
  s["status"] = status;
  s["model"] = model_.info().architecture;
  s["source"] = cfg_.model.path;
  s["labels"] = data_.labels.names;
  s["initialised"] = load_report_.initialised;
  s["device"] = device_name(plan_.target.device);
  s["precision"] = std::string(precision_name(plan_.precision.precision));
  s["attention"] = attention_kernel_name(plan_.attention.kernel);
  s["attention_memory"] = attention_memory_note(
      uses_cudnn_attention(plan_.target.attention, plan_.target.device, plan_.target.precision));
  s.update(strategy_->report());
  s["peft"] = peft_method_name(cfg_.peft.method);
  s["trainable_parameters"] = clf().trainable_params().total();
  s["threads"] = compute_threads();
  s["steps"] = state_.step;
  s["total_steps"] = total_steps_;
  s["epochs"] = static_cast<double>(state_.step) / steps_per_epoch_;
  s["effective_batch"] = effective_;  // rows (listwise: groups x group_size)
  if (sampler_)
    s["listwise"] = {{"group_size", sampler_->group_size()},
                     {"groups_per_step", effective_ / sampler_->group_size()},
                     {"groups", sampler_->groups()},
                     {"skipped_without_positive", sampler_->skipped_without_positive()},
                     {"skipped_without_negative", sampler_->skipped_without_negative()},
                     {"groups_with_repeated_negatives", sampler_->padded_groups()}};
  s["skipped_steps"] = state_.skipped;
  // Host reads of device scalars during this run: the step scalars (once per logging interval,
  // evaluation and checkpoint) and single-value reads (evaluation's per-batch loss).
  s["host_reads"] = {{"step_scalars", step_scalar_reads() - step_scalar_reads_at_start_},
                     {"scalars", host_scalar_reads() - host_scalar_reads_at_start_}};
  s["train_samples"] = state_.samples;
  s["train_real_tokens"] = state_.tokens;
  s["train_samples_per_s"] = state_.train_seconds > 0 ? state_.samples / state_.train_seconds : 0.0;
  s["train_tokens_per_s"] = state_.train_seconds > 0 ? state_.tokens / state_.train_seconds : 0.0;
  s["train_seconds"] = state_.train_seconds;
  s["input_wait_seconds"] = state_.wait_seconds;
  s["input_wait_fraction"] =
      state_.train_seconds > 0 ? state_.wait_seconds / state_.train_seconds : 0.0;
  s["wall_seconds"] = seconds_since(t_start_);
  // FLOPs and MFU (train/flops.h) of every rank's micro-batches, the samples/s being the ranks'
  // together; the precision is the run's GEMM math. (null when this process trained nothing: a
  // resumed run that only had to finish)
  const nlohmann::json flops =
      flops_summary(work, s["train_samples_per_s"].get<double>(), plan_.target.device,
                    plan_.precision.precision, tf32_gemms_on(), group_->size());
  if (flops.is_object()) s.update(flops);
  s["peak_host_bytes"] = device_bytes_peak(DeviceKind::CPU);
  if (!plan_.target.device.is_cpu())
    s["peak_device_bytes"] = device_bytes_peak(plan_.target.device.kind);
  s["peak_rss_bytes"] = peak_rss_bytes();
  if (outputs_.gpu_sampler) s["gpu"] = outputs_.gpu_sampler->json();
  s["eval_metric"] = eval_metric_;
  s["final_eval"] = state_.last_eval;
  s["best_eval"] = state_.best_eval;
  s["data"] = data_.report;
  if (outputs_.store) {
    if (auto b = outputs_.store->best()) s["best_checkpoint"] = b->dir;
    if (auto l = outputs_.store->last()) s["last_checkpoint"] = l->dir;
  }
  return s;
}

}  // namespace ftune
