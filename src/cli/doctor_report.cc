// Optimisation states for `ftune doctor` (see doctor_report.h). Each rule states what the trainer
// of this build really does, through the trainer's own resolution of the config where there is
// one; what is not built says "not implemented", so the report never claims more than the code
// does.
#include "cli/doctor_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "optim/adamw.h"
#include "train/input_staging.h"
#include "train/precision.h"
#include "train/step_graphs.h"

namespace ftune::cli {
namespace {

std::string sm(const DoctorFacts& f) {
  return fmt::format("sm_{}{}", f.sm_major, f.sm_minor);
}

}  // namespace

std::vector<OptimisationState> optimisation_states(const DoctorFacts& f, const TrainConfig& cfg) {
  const TrainConfig::Training& t = cfg.training;
  const bool cpu = f.device.is_cpu();
  const bool gpu = !cpu && f.device_visible;
  const std::string not_visible = fmt::format("{} is not visible here", device_name(f.device));
  std::vector<OptimisationState> out;
  const auto add = [&out](std::string name, std::string state, std::string reason) {
    out.push_back({std::move(name), std::move(state), std::move(reason)});
  };

  // Mixed precision and TF32: the trainer's own resolution (train/precision.h), for the facts'
  // device rather than the one this process can see.
  Precision precision = Precision::FP32;
  if (!cpu && !gpu) {
    add("mixed precision (bf16/fp16)", "unknown", not_visible);
  } else {
    try {
      const ResolvedPrecision r = resolve_precision(t.precision, f.device, f.bf16);
      precision = r.precision;
      if (precision == Precision::BF16)
        add("bf16 mixed precision", "on", r.reason);
      else if (precision == Precision::FP16)
        add("fp16 mixed precision + loss scaling", "on", r.reason);
      else
        add("mixed precision (bf16/fp16)", "off", r.reason);
    } catch (const InputError& e) {
      add("mixed precision (bf16/fp16)", "error", e.what());
    }
  }

  if (cpu)
    add("TF32 for fp32 GEMMs", "off", "CPU (fp32 GEMMs: OpenBLAS or oneDNN)");
  else if (!gpu)
    add("TF32 for fp32 GEMMs", "unknown", not_visible);
  else if (!f.tf32)
    add("TF32 for fp32 GEMMs", "unavailable", fmt::format("{} has no TF32 tensor cores", sm(f)));
  else {
    const ResolvedTf32 r = resolve_tf32(t.tf32, f.device, precision);
    add("TF32 for fp32 GEMMs", r.on ? "on" : "off", r.reason);
  }

  if (cpu)
    add("fused AdamW", "on", "one threaded pass over all parameters (fp32 master weights)");
  else
    add("fused AdamW", "on",
        fmt::format("CUDA: one kernel launch per {} parameter tensors (fp32 master weights)",
                    cuda::kAdamWSegmentsPerLaunch));

  // Attention.
  if (cpu) {
    add("flash attention (cuDNN)", "off", "CPU: ftune's reference attention");
  } else if (!f.cudnn_sdpa_compiled) {
    add("flash attention (cuDNN)", "off", "not compiled: " + f.cudnn_sdpa_note);
  } else if (!f.cudnn_runtime) {
    add("flash attention (cuDNN)", "unavailable", "cuDNN runtime missing: " + f.cudnn_detail);
  } else if (gpu && f.sm_major < 8) {
    add("flash attention (cuDNN)", "unavailable",
        fmt::format("cuDNN fused attention needs sm_80 or later, {} is older", sm(f)));
  } else {
    try {
      const ResolvedAttention r = resolve_attention(t.attention, f.device, precision, true);
      const bool on = r.kernel == AttentionKernel::Cudnn;
      add("flash attention (cuDNN)", on ? "on" : "off",
          r.reason + " (cuDNN " + f.cudnn_detail + ")" +
              (on ? "; the (B, H, T, T) probabilities are not stored: per layer only the softmax "
                    "statistics (B, H, T) fp32, so the planned micro-batch grows"
                  : ""));
    } catch (const InputError& e) {
      add("flash attention (cuDNN)", "error", e.what());
    }
  }
  if (!cpu)
    add("fused attention kernel (ftune)", "on",
        "fp32 / bf16 / fp16 storage, fp32 math: masked softmax, dropout and both products per "
        "row; probabilities kept for backward; ftune's Philox masks (CPU parity)");

  switch (t.gradient_checkpointing) {
    case GradientCheckpointing::Auto:
      add("gradient checkpointing", "auto",
          "training.gradient_checkpointing auto: the planner turns it on per run only when it "
          "cuts gradient accumulation");
      break;
    case GradientCheckpointing::On:
      add("gradient checkpointing", "on", "training.gradient_checkpointing on");
      break;
    case GradientCheckpointing::Off:
      add("gradient checkpointing", "off", "training.gradient_checkpointing off");
      break;
  }

  const std::string effective = t.effective_batch_size > 0
                                    ? fmt::format("effective batch {}", t.effective_batch_size)
                                    : std::string("the effective batch");
  const std::string budget =
      !t.memory_budget.empty()
          ? fmt::format("training.memory_budget {}", t.memory_budget)
          : fmt::format("training.memory_fraction {:g} of the available memory", t.memory_fraction);
  if (t.batch_size == 0)
    add("micro-batch from the memory plan", "on",
        fmt::format("training.batch_size auto: the largest that fits {}, accumulating to {} "
                    "(`ftune plan` shows it)",
                    budget, effective));
  else
    add("micro-batch from the memory plan", "off",
        fmt::format("training.batch_size {} fixed, accumulation to {}", t.batch_size, effective));

  add("length-bucketed batches", "on",
      "rows of similar length batched together, each micro-batch padded to its own longest row "
      "(rounded up to training.pad_to_multiple_of)");
  if (t.prefetch > 0)
    add("input prefetch", "on",
        fmt::format("training.prefetch {}: step batches assembled ahead on a thread", t.prefetch));
  else
    add("input prefetch", "off", "training.prefetch 0");

  if (!cpu)
    add("pinned staging / copy stream", "on",
        "two pinned host slots: the next micro-batch's inputs are copied on the copy stream "
        "while the current one computes (events order the streams)");
  if (precision == Precision::FP16)
    add("no host sync per step", "off",
        "fp16: the host follows the loss scale, one small read per step");
  else
    add("no host sync per step", "on",
        fmt::format("loss, gradient norm and skip counters stay on the device; the host reads "
                    "them every training.log_every ({}) steps",
                    t.log_every));
  try {
    const ResolvedCudaGraphs g = resolve_cuda_graphs(t.cuda_graphs, f.device);
    add("CUDA graphs", g.on ? "on" : "off", g.why);
  } catch (const InputError& e) {
    add("CUDA graphs", "error", e.what());
  }
  try {
    const PadRule pad = resolve_padding(t.pad_to_multiple_of, f.device);
    const bool on = pad.buckets || pad.multiple > 1;
    add("padding to a multiple", on ? "on" : "off",
        on ? fmt::format("micro-batches padded: {} (few shapes for graphs and cuDNN plans; "
                         "masked, results unchanged)",
                         pad.describe())
           : std::string("each micro-batch padded only to its longest row"));
  } catch (const InputError& e) {
    add("padding to a multiple", "error", e.what());
  }

  if (cpu)
    add("NVML sampling", "off", "CPU run");
  else if (!gpu)
    add("NVML sampling", "unknown", not_visible);
  else if (f.nvml_available)
    add("NVML sampling", "on",
        "every 0.5 s: GPU utilisation and memory in the progress bar, "
        "summary.json \"gpu\"");
  else
    add("NVML sampling", "unavailable", f.nvml_reason);
  return out;
}

std::string format_optimisations(const std::vector<OptimisationState>& states) {
  size_t name_width = 0, state_width = 0;
  for (const OptimisationState& s : states) {
    name_width = std::max(name_width, s.name.size());
    state_width = std::max(state_width, s.state.size());
  }
  std::string out;
  for (const OptimisationState& s : states)
    out +=
        fmt::format("  {:<{}}  {:<{}}  {}\n", s.name, name_width, s.state, state_width, s.reason);
  return out;
}

}  // namespace ftune::cli
