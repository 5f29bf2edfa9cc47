// Memory planning (see memory_planner.h).
#include "train/memory_planner.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "core/column_order.h"
#include "core/error.h"
#include "core/memory.h"
#include "models/sequence_classifier.h"
#include "ops/attention_cudnn.h"
#include "ops/backend_context.h"
#include "optim/adamw.h"
#include "train/input_staging.h"

namespace ftune {
namespace {

struct CategoryInfo {
  const char* name;
  const char* note;
};

// The categories in print order, with what each holds.
const std::vector<CategoryInfo>& category_list() {
  static const std::vector<CategoryInfo> list = {
      {"parameters",
       "fp32 weights (base model, adapters, head); with LoRA and bf16 / f16 "
       "compute the frozen layers' GEMM weights, embedding tables and a causal LM's head in "
       "that type alone"},
      {"master weights", "none: in fp32 the parameters are the master copy"},
      {"weight shadow",
       "mixed precision: bf16 / f16 copy of the encoder layers' weights for the "
       "GEMMs (none in fp32)"},
      {"gradients", "fp32, trainable parameters only"},
      {"optimizer state", "AdamW exp_avg + exp_avg_sq, fp32"},
      {"adapter caches", "DoRA: ||W||^2 and weight norms per adapted linear"},
      {"activations",
       "saved for the backward pass (checkpointing: layer outputs + one layer); mixed precision: "
       "GEMM inputs and outputs in bf16 / f16, residual stream and LayerNorms in fp32"},
      {"attention", attention_memory_note(false)},
      {"activation gradients", "reused across layers"},
      {"workspace", "attention and layer-norm scratch, LoRA dropout, a causal LM's block of logits"},
      {"GEMM workspace", "none on the CPU"},
      {"input staging",
       "token ids, types, positions, mask, labels, float targets of score tasks; two staged "
       "copies (double buffer)"},
      {"step scalars", "loss, gradient norm, clip factor, skip counters, AdamW's t (on device)"},
  };
  return list;
}

}  // namespace

const char* MemoryPlan::category_of(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (starts("param/")) return "parameters";
  if (starts("shadow/")) return "weight shadow";
  if (starts("grad/")) return "gradients";
  if (starts("adam/")) return "optimizer state";
  if (starts("adapter/")) return "adapter caches";
  if (starts("gradact/")) return "activation gradients";
  if (starts("act/")) {
    // A layer's attention probabilities (or cuDNN's state), whatever the family's prefix
    // ("act/layer0/probs", "act/dec0/probs"); the head's softmax ("act/loss/probs") is an
    // activation.
    const size_t slash = name.rfind('/');
    return !starts("act/loss/") && name.compare(slash + 1, std::string::npos, "probs") == 0
               ? "attention"
               : "activations";
  }
  if (starts("work/")) return "workspace";
  if (starts("input/")) return "input staging";
  if (starts("step/")) return "step scalars";
  throw InternalError(fmt::format("memory plan: buffer '{}' has no category", name));
}

MemoryPlan MemoryPlan::from(const ArenaPlan& plan, Device device) {
  MemoryPlan m;
  std::map<std::string, size_t> bytes;
  for (const PlannedBuffer& b : plan.buffers()) bytes[category_of(b.name)] += align_up(b.bytes);
  for (const CategoryInfo& c : category_list()) {
    m.categories.push_back({c.name, bytes[c.name], c.note});
    m.arena += bytes[c.name];
  }
  FTUNE_ASSERT(m.arena == plan.total_bytes(), "memory plan categories sum to {} of {} bytes",
               m.arena, plan.total_bytes());
  m.total = m.arena;
  if (!device.is_cpu()) {
    // cuBLASLt's workspace and the column reductions' partial sums: one of each per device,
    // allocated once outside the arena (cuda/gemm.h, core/column_order.h).
    const size_t fixed =
        gemm_workspace_bytes(device) +
        static_cast<size_t>(kColumnPartialFloats + kColumnResultFloats) * sizeof(float);
    for (MemoryCategory& c : m.categories)
      if (c.name == "GEMM workspace") {
        c.bytes = fixed;
        c.note = "cuBLASLt workspace and column-sum partials, one per device, outside the arena";
      }
    m.total += fixed;
  }
  return m;
}

int64_t packed_rows(const PlanTarget& target, int64_t tokens) {
  int64_t rows = tokens / std::max<int64_t>(1, target.shortest);
  if (target.max_rows > 0) rows = std::min(rows, target.max_rows);
  return std::max<int64_t>(rows, 1);
}

RunCut run_cut(const PlanTarget& target, int64_t micro_batch) {
  RunCut cut;
  if (target.packed) {
    cut.rows = cut.eval_rows = packed_rows(target, micro_batch);
    cut.tokens = cut.eval_tokens = micro_batch;
  } else {
    cut.rows = micro_batch;
    cut.eval_rows = target.eval_batch > 0 ? target.eval_batch : micro_batch;
  }
  return cut;
}

std::optional<RunShape> largest_in_run(const PlanTarget& target, int64_t micro_batch) {
  if (!target.run) return std::nullopt;
  return target.run->shape(run_cut(target, micro_batch));
}

ClassifierOptions training_classifier_options(const PlanTarget& target, int64_t micro_batch,
                                              GradientCheckpointing checkpointing) {
  ClassifierOptions options;
  options.max_batch = target.packed ? packed_rows(target, micro_batch)
                                    : std::max(micro_batch, target.eval_batch);
  options.max_seq = target.max_seq;
  options.packed = target.packed;
  options.max_tokens = target.packed ? micro_batch : 0;
  if (const std::optional<RunShape> run = largest_in_run(target, micro_batch)) {
    // The run's largest micro-batch, per dimension (train/run_micro_batches.h): padded buffers
    // are rows x longest, packed ones its tokens (at least the longest row, which a packed model
    // requires).
    options.max_batch = run->rows;
    options.max_seq = run->longest;
    options.max_token_positions = run->token_positions;
    if (target.packed) options.max_tokens = std::max(run->tokens, run->longest);
  }
  options.training = true;
  options.own_inputs = false;  // staged (train/input_staging.h)
  options.adapters = target.adapters;
  options.checkpointing = checkpointing;
  options.compute = target.precision;
  options.device = target.device;
  options.attention = target.attention;
  return options;
}

int64_t staged_target_width(const PlanTarget& target) {
  return target.float_targets ? target.model.num_labels() : 0;
}

ArenaPlan training_arena_plan(const PlanTarget& target, int64_t micro_batch,
                              GradientCheckpointing checkpointing) {
  const SequenceClassifier model(target.model,
                                 training_classifier_options(target, micro_batch, checkpointing));
  const AdamW adamw(model.trainable_params(), AdamWOptions{});
  ArenaPlan plan;
  model.add_to_plan(plan);
  adamw.add_to_plan(plan);
  InputStaging(model.options().max_batch, model.options().max_seq, PadRule{},
               model.options().packed ? model.options().max_tokens : 0,
               staged_target_width(target), target.model.info().causal_lm)
      .add_to_plan(plan);
  return plan;
}

MemoryPlan plan_memory(const PlanTarget& target, int64_t micro_batch,
                       GradientCheckpointing checkpointing) {
  MemoryPlan m =
      MemoryPlan::from(training_arena_plan(target, micro_batch, checkpointing), target.device);
  m.micro_batch = micro_batch;
  m.rows = target.packed ? packed_rows(target, micro_batch)
                         : std::max(micro_batch, target.eval_batch);
  m.max_seq = target.max_seq;
  m.planned_for = largest_in_run(target, micro_batch);
  if (m.planned_for) {
    m.rows = m.planned_for->rows;
    m.max_seq = m.planned_for->longest;
  }
  m.checkpointing = checkpointing;
  for (MemoryCategory& c : m.categories)
    if (c.name == "attention")
      c.note = attention_memory_note(
          uses_cudnn_attention(target.attention, target.device, target.precision));
  return m;
}

int64_t largest_micro_batch(const PlanTarget& target, GradientCheckpointing checkpointing,
                            size_t budget, int64_t cap) {
  auto fits = [&](int64_t m) { return plan_memory(target, m, checkpointing).total <= budget; };
  const int64_t least = target.min_micro_batch();
  if (cap < least || !fits(least)) return 0;
  if (fits(cap)) return cap;
  int64_t lo = least, hi = cap;  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::pair<int64_t, int64_t> split_effective_batch(int64_t effective, int64_t fit) {
  FTUNE_ASSERT(effective >= 1 && fit >= 1, "split_effective_batch({}, {})", effective, fit);
  const int64_t accumulation = (effective + fit - 1) / fit;
  return {accumulation, (effective + accumulation - 1) / accumulation};
}

namespace {

// Packed micro-batches: a token budget (see choose_batch in memory_planner.h).
BatchChoice choose_packed_batch(const PlanTarget& target, const BatchRequest& r) {
  BatchChoice c;
  c.effective_batch = r.effective_batch;
  c.budget = r.budget;
  const int64_t T = target.max_seq;
  const int64_t cap = (r.micro_batch > 0 ? r.micro_batch : r.effective_batch) * T;
  c.fits_without_checkpointing =
      largest_micro_batch(target, GradientCheckpointing::Off, r.budget, cap);
  const bool may_checkpoint = r.checkpointing != GradientCheckpointing::Off;
  if (may_checkpoint)
    c.fits_with_checkpointing = largest_micro_batch(target, GradientCheckpointing::On, r.budget, cap);
  const int64_t fit_off = c.fits_without_checkpointing, fit_on = c.fits_with_checkpointing;
  // Micro-batches a step of effective rows of the longest length needs at worst.
  const auto worst = [&](int64_t tokens) {
    return tokens > 0 ? (r.effective_batch * T + tokens - 1) / tokens : INT64_MAX;
  };
  const std::string budget_text = format_bytes(r.budget);
  if (r.micro_batch > 0) {
    c.micro_tokens = r.micro_tokens > 0 ? std::max(r.micro_tokens, T) : cap;
    if (r.checkpointing == GradientCheckpointing::Auto)
      c.checkpointing = fit_off < c.micro_tokens && fit_on >= c.micro_tokens
                            ? GradientCheckpointing::On
                            : GradientCheckpointing::Off;
    else
      c.checkpointing = r.checkpointing;
    c.over_budget =
        (c.checkpointing == GradientCheckpointing::On ? fit_on : fit_off) < c.micro_tokens;
    c.reason = fmt::format("micro-batch {} rows as configured (training.batch_size), packed",
                           r.micro_batch);
  } else {
    if (fit_off == 0 && fit_on == 0)
      throw InputError(fmt::format(
          "training.batch_size auto: not even one packed sequence of {} tokens fits the memory "
          "budget {}; use a smaller data.max_length, adapters (peft), or a larger "
          "training.memory_budget / memory_fraction",
          T, budget_text));
    bool on = r.checkpointing == GradientCheckpointing::On;
    if (r.checkpointing == GradientCheckpointing::Auto && fit_on > 0)
      on = worst(fit_on) < worst(fit_off);
    if (!on && fit_off == 0)
      throw InputError(fmt::format(
          "training.batch_size auto: not even one packed sequence of {} tokens fits the memory "
          "budget {} without gradient checkpointing (training.gradient_checkpointing is off; set "
          "it to auto or on)",
          T, budget_text));
    c.checkpointing = on ? GradientCheckpointing::On : GradientCheckpointing::Off;
    c.micro_tokens = on ? fit_on : fit_off;
    c.reason = fmt::format(
        "largest packed micro-batch (up to the effective batch of {}-token rows) in the budget "
        "{}: {} tokens without gradient checkpointing{}",
        T, budget_text, fit_off,
        may_checkpoint ? fmt::format(", {} with it", fit_on) : std::string());
    if (r.checkpointing == GradientCheckpointing::Auto)
      c.reason += on ? "; gradient checkpointing on: it needs fewer micro-batches"
                     : "; gradient checkpointing off: it would not reduce the micro-batches";
  }
  c.micro_batch = r.micro_batch > 0 ? r.micro_batch : packed_rows(target, c.micro_tokens);
  c.accumulation = worst(c.micro_tokens);
  c.reason += fmt::format("; effective batch {} in at most {} micro-batches of {} tokens",
                          r.effective_batch, c.accumulation, c.micro_tokens);
  c.planned_bytes = plan_memory(target, c.micro_tokens, c.checkpointing).total;
  return c;
}

}  // namespace

BatchChoice choose_batch(const PlanTarget& target, const BatchRequest& r) {
  if (target.packed) return choose_packed_batch(target, r);
  BatchChoice c;
  c.effective_batch = r.effective_batch;
  c.budget = r.budget;
  const int64_t cap = r.micro_batch > 0 ? r.micro_batch : r.effective_batch;
  c.fits_without_checkpointing =
      largest_micro_batch(target, GradientCheckpointing::Off, r.budget, cap);
  const bool may_checkpoint = r.checkpointing != GradientCheckpointing::Off;
  if (may_checkpoint)
    c.fits_with_checkpointing =
        largest_micro_batch(target, GradientCheckpointing::On, r.budget, cap);
  const std::string budget_text = format_bytes(r.budget);

  if (r.micro_batch > 0) {
    c.micro_batch = r.micro_batch;
    c.accumulation = (r.effective_batch + r.micro_batch - 1) / r.micro_batch;
    const bool fits_off = c.fits_without_checkpointing >= r.micro_batch;
    const bool fits_on = c.fits_with_checkpointing >= r.micro_batch;
    if (r.checkpointing == GradientCheckpointing::Auto)
      c.checkpointing =
          !fits_off && fits_on ? GradientCheckpointing::On : GradientCheckpointing::Off;
    else
      c.checkpointing = r.checkpointing;
    c.over_budget = c.checkpointing == GradientCheckpointing::On ? !fits_on : !fits_off;
    c.reason = fmt::format("micro-batch {} as configured (training.batch_size)", r.micro_batch);
    if (r.checkpointing == GradientCheckpointing::Auto)
      c.reason += c.checkpointing == GradientCheckpointing::On
                      ? "; gradient checkpointing on: without it the micro-batch does not fit"
                      : "; gradient checkpointing off: not needed";
  } else {
    const int64_t fit_off = c.fits_without_checkpointing, fit_on = c.fits_with_checkpointing;
    if (fit_off == 0 && fit_on == 0) {
      const size_t one_row = plan_memory(target, 1,
                                         may_checkpoint ? GradientCheckpointing::On
                                                        : GradientCheckpointing::Off)
                                 .total;
      throw InputError(fmt::format(
          "training.batch_size auto: not even one sequence of {} tokens fits the memory budget "
          "{} (one row needs {}{}); use a smaller data.max_length, adapters (peft), or a larger "
          "training.memory_budget / memory_fraction",
          target.max_seq, budget_text, format_bytes(one_row),
          may_checkpoint ? " with gradient checkpointing" : ""));
    }
    const auto [acc_off, micro_off] =
        fit_off > 0 ? split_effective_batch(r.effective_batch, fit_off)
                    : std::pair<int64_t, int64_t>{INT64_MAX, 0};
    bool on = r.checkpointing == GradientCheckpointing::On;
    if (r.checkpointing == GradientCheckpointing::Auto && fit_on > 0) {
      const int64_t acc_on = split_effective_batch(r.effective_batch, fit_on).first;
      on = acc_on < acc_off;
    }
    if (r.checkpointing == GradientCheckpointing::Off && fit_off == 0)
      throw InputError(fmt::format(
          "training.batch_size auto: not even one sequence of {} tokens fits the memory budget {} "
          "without gradient checkpointing (training.gradient_checkpointing is off; set it to "
          "auto or on)",
          target.max_seq, budget_text));
    const int64_t fit = on ? fit_on : fit_off;
    std::tie(c.accumulation, c.micro_batch) = split_effective_batch(r.effective_batch, fit);
    c.checkpointing = on ? GradientCheckpointing::On : GradientCheckpointing::Off;
    c.reason = fmt::format(
        "largest micro-batch (up to the effective batch) in the budget {} for sequences of {} "
        "tokens: {} without gradient checkpointing{}; effective batch {} = {} x {}",
        budget_text, target.max_seq, fit_off,
        may_checkpoint ? fmt::format(", {} with it", fit_on) : std::string(), r.effective_batch,
        c.micro_batch, c.accumulation);
    if (r.checkpointing == GradientCheckpointing::Auto)
      c.reason += on ? "; gradient checkpointing on: it needs fewer accumulation steps"
                     : "; gradient checkpointing off: it would not reduce accumulation";
  }
  c.planned_bytes = plan_memory(target, c.micro_batch, c.checkpointing).total;
  return c;
}

std::string format_bytes(size_t b) {
  const double kib = 1024.0;
  if (b >= size_t{1} << 30) return fmt::format("{:.2f} GiB", b / (kib * kib * kib));
  if (b >= size_t{1} << 20) return fmt::format("{:.1f} MiB", b / (kib * kib));
  if (b >= size_t{1} << 10) return fmt::format("{:.1f} KiB", b / kib);
  return fmt::format("{} B", b);
}

size_t parse_bytes(const std::string& text, const std::string& key) {
  static const std::vector<std::pair<std::string, double>> units = {
      {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"B", 1.0}, {"", 1.0}};
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = used ? text.substr(used) : "";
  unit.erase(0, unit.find_first_not_of(' '));
  for (const auto& [name, scale] : units)
    if (used && unit == name && value > 0 && std::isfinite(value))
      return static_cast<size_t>(value * scale);
  throw InputError(fmt::format(
      "{} must be a positive size such as 8GiB, 512MiB, 16GB or a number of bytes, got '{}'", key,
      text));
}

}  // namespace ftune
