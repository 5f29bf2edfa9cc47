// The single-device step strategy (see single_device_step.h): the arena, its out-of-memory
// fallback, the run's resolved step settings (TF32, CUDA graphs, padding, fp16's loss scaler) and
// the step as the sequence of its jobs. How a step is cut and why its result does not depend on
// the cut is train/micro_batch_pass.h's; the sum over data-parallel ranks is
// train/gradient_sync.h's; clipping, the non-finite skip and AdamW are train/optimizer_tail.h's.
//
// No host round trip per step (DESIGN principle 4): the step's loss, gradient norm, clip factor,
// non-finite check, skip counters and AdamW's t live on the device (optim/step_scalars.h); the run
// loop reads them once per logging interval.
#include "train/single_device_step.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "core/memory.h"
#include "core/op_profile.h"
#include "data/token_batch.h"
#include "models/batch.h"
#include "ops/backend_context.h"
#include "optim/layer_decay.h"
#include "optim/step_scalars.h"
#include "train/micro_batch_pass.h"

namespace ftune {
namespace {

// Executable CUDA graphs kept at most (train/step_graphs.h): (rows, padded length) keys of a GPU
// run's length buckets up to 512 tokens are 20 per micro-batch size.
constexpr int64_t kMaxStepGraphs = 256;

// Rows of a query group in a listwise / margin_mse run (1: rows stand alone).
int64_t group_rows(const LossOptions& loss) {
  return std::max<int64_t>(1, loss.listwise_group_size);
}

// Rows of a full step batch: the effective batch counts groups in a listwise / margin_mse run.
int64_t step_rows(const TrainConfig& config, const LossOptions& loss) {
  return config.effective_batch() * group_rows(loss);
}

}  // namespace

SingleDeviceStep::SingleDeviceStep(const TrainConfig& config, const ModelSpec& model,
                                   const RunBatchPlan& plan, int64_t stream_seq,
                                   const LossOptions& loss, const DebugHooks& hooks,
                                   GradientReducer* reducer)
    : cfg_(config),
      tc_(config.training),
      model_(model),
      plan_(plan),
      stream_seq_(stream_seq),
      loss_(loss),
      hooks_(hooks),
      sync_(reducer ? std::unique_ptr<GradientSync>(std::make_unique<RankGradientSync>(*reducer))
                    : std::make_unique<LocalGradientSync>()),
      effective_(sync_->most_rows(step_rows(config, loss), group_rows(loss))),
      pad_id_(static_cast<int32_t>(model.info().pad_token_id)) {
  micro_batch_ = plan_.choice.micro_batch;
  micro_tokens_ = plan_.choice.micro_tokens;
  checkpointing_ = plan_.choice.checkpointing;
  const Device device = plan_.target.device;
  tf32_ = resolve_tf32(tc_.tf32, device, plan_.precision.precision);
  cuda_graphs_ = resolve_cuda_graphs(tc_.cuda_graphs, device);
  if (cuda_graphs_.on && profile::ops_enabled())  // a replayed graph has no op launches to time
    cuda_graphs_ = {false, "FTUNE_PROFILE_OPS times the ops of a step eagerly"};
  pad_ = resolve_padding(tc_.pad_to_multiple_of, device);
  if (!device.is_cpu())
    spdlog::info("CUDA graphs {} ({}); micro-batch padding: {}{}", cuda_graphs_.on ? "on" : "off",
                 cuda_graphs_.why, pad_.describe(),
                 cuda_graphs_.on && micro_tokens_ > 0 ? fmt::format("; {}", kPackedMicroBatchesEager) : "");
  // The ops follow the run's TF32 choice through one channel (the attention kernel travels
  // with the model's plan: ClassifierOptions::attention).
  set_backend_context(device, BackendContext{tf32_.on});
  if (!device.is_cpu())
    spdlog::info("TF32 for fp32 GEMMs {} ({})", tf32_.on ? "on" : "off", tf32_.reason);
  LossScalerOptions so;
  so.enabled = plan_.precision.precision == Precision::FP16;
  if (hooks_.loss_scale_log2 >= 0)
    so.init_scale = std::ldexp(1.0f, static_cast<int>(hooks_.loss_scale_log2));
  scaler_ = LossScaler(so);
  build();
}

// Listwise (group size g > 1): a micro-batch never holds less than one whole group, so halving
// stops at g rows (padded: multiples of g) or g longest rows' tokens (packed).
bool SingleDeviceStep::can_halve() const {
  const int64_t g = group_rows(loss_);
  return micro_tokens_ > 0 ? micro_tokens_ > g * plan_.target.max_seq : micro_batch_ > g;
}

int64_t SingleDeviceStep::halved() const {
  const int64_t g = group_rows(loss_);
  if (micro_tokens_ > 0) return std::max((micro_tokens_ + 1) / 2, g * plan_.target.max_seq);
  const int64_t half = (micro_batch_ + 1) / 2;
  return std::max(g, half - half % g);
}

void SingleDeviceStep::set_plan_unit(int64_t m) {
  if (micro_tokens_ > 0) {
    micro_tokens_ = m;
    micro_batch_ = std::min(micro_batch_, packed_rows(plan_.target, m));
  } else {
    micro_batch_ = m;
  }
}

std::string SingleDeviceStep::unit_text(int64_t m) const {
  return micro_tokens_ > 0 ? fmt::format("{} tokens", m) : std::to_string(m);
}

int64_t SingleDeviceStep::accumulation() const {
  const int64_t rows = micro_tokens_ > 0 ? micro_tokens_ / plan_.target.max_seq : micro_batch_;
  return (effective_ + rows - 1) / std::max<int64_t>(rows, 1);
}

void SingleDeviceStep::build() {
  const Device device = plan_.target.device;
  while (true) {
    // Evaluation batches as the plan cut them (train/run_micro_batches.h): padded, eval.batch_size
    // rows (0: the micro-batch); packed, the micro-batch's rows and token budget.
    const RunCut cut = run_cut(plan_.target, plan_unit());
    eval_batch_ = cut.eval_rows;
    eval_tokens_ = cut.eval_tokens;
    clf_ = std::make_unique<SequenceClassifier>(
        model_, training_classifier_options(plan_.target, plan_unit(), checkpointing_));
    adamw_ = std::make_unique<AdamW>(
        clf_->trainable_params(),
        AdamWOptions{static_cast<float>(tc_.learning_rate), static_cast<float>(tc_.adam_beta1),
                     static_cast<float>(tc_.adam_beta2), static_cast<float>(tc_.adam_epsilon),
                     static_cast<float>(tc_.weight_decay)});
    graphs_.reset();  // captured with the old arena's pointers
    staging_ = std::make_unique<InputStaging>(
        clf_->options().max_batch, clf_->options().max_seq, pad_,
        clf_->options().packed ? clf_->options().max_tokens : 0,
        staged_target_width(plan_.target), model_.info().causal_lm);
    ArenaPlan plan;
    clf_->add_to_plan(plan);
    adamw_->add_to_plan(plan);
    staging_->add_to_plan(plan);
    const size_t bytes = plan.total_bytes();
    const int64_t arena_limit = hooks_.arena_memory;
    if (!device.is_cpu() && free_before_run_ == 0)
      free_before_run_ = device_memory_info(device).available;
    try {
      arena_.reset();
      if (arena_limit >= 0)
        set_device_memory_limit(device.kind, device_bytes_in_use(device.kind) + size_t(arena_limit));
      arena_ = std::make_unique<Arena>(device, std::move(plan));
      if (arena_limit >= 0) set_device_memory_limit(device.kind, std::nullopt);
    } catch (const OutOfMemoryError& e) {
      if (arena_limit >= 0) set_device_memory_limit(device.kind, std::nullopt);
      if (!can_halve())
        throw OutOfMemoryError(fmt::format(
            "{}; not even a micro-batch of one sequence of {} tokens fits ({} planned)", e.what(),
            plan_.target.max_seq, format_bytes(bytes)));
      const int64_t was = plan_unit(), smaller = halved();
      set_plan_unit(smaller);
      spdlog::warn(
          "out of memory allocating the {} arena of micro-batch {} ({}); retrying with "
          "micro-batch {} x {} accumulation (effective batch {} kept)",
          format_bytes(bytes), unit_text(was), e.what(), unit_text(smaller), accumulation(),
          effective_);
      oom_retries_.push_back({{"micro_batch", was},
                              {"planned_bytes", bytes},
                              {"error", e.what()},
                              {"retried_with", smaller}});
      continue;
    }
    break;
  }
  // Every byte starts as a sentinel, so the run can report how much of each planned buffer it
  // really used (summary.json memory.touched_bytes).
  if (arena_->device().is_cpu()) arena_->fill_with_sentinel();
  std::string plan_text;
  for (const MemoryCategory& c : MemoryPlan::from(arena_->plan(), device).categories)
    if (c.bytes) plan_text += fmt::format(", {} {}", c.name, format_bytes(c.bytes));
  const std::optional<RunShape> run = largest_in_run(plan_.target, plan_unit());
  spdlog::info("arena: {} for micro-batches of {} tokens{}{} ({})",
               format_bytes(arena_->capacity()),
               micro_tokens_ > 0 ? fmt::format("{} packed", micro_tokens_)
                                 : fmt::format("{} x {}", micro_batch_, plan_.target.max_seq),
               eval_batch_ > micro_batch_ ? fmt::format(" (evaluation {})", eval_batch_) : "",
               run ? fmt::format(", planned for the run's largest: {} rows, {} tokens, longest {} "
                                 "({})",
                                 run->rows, run->tokens, run->longest, run->largest.describe())
                   : "",
               plan_text.substr(2));
  clf_->bind(*arena_);
  adamw_->bind(*arena_);
  staging_->bind(*arena_);
  if (cuda_graphs_.on)
    graphs_ = std::make_unique<StepGraphs>(cuda_graph_backend(device), kMaxStepGraphs);
  if (tc_.layer_decay < 1.0)
    apply_layer_decay(*adamw_, clf_->trainable_params(), model_.info().num_layers,
                      tc_.layer_decay);
  tail_ = std::make_unique<OptimizerTail>(*clf_, *adamw_, scaler_, tc_, graphs_.get());
  sync_->plan(clf_->trainable_params(), clf_->trainable_grads());
}

void SingleDeviceStep::recover(const OutOfMemoryError& e, int64_t step) {
  if (!can_halve())
    throw OutOfMemoryError(fmt::format("{} (at step {}, micro-batch {}: nothing left to halve)",
                                       e.what(), step + 1, unit_text(plan_unit())));
  const int64_t was = plan_unit(), smaller = halved();
  oom_retries_.push_back({{"step", step + 1},
                          {"micro_batch", was},
                          {"planned_bytes", arena_->capacity()},
                          {"error", e.what()},
                          {"retried_with", smaller}});
  // The trained state goes through host memory while the arena is rebuilt smaller.
  std::vector<HostTensor> values;
  for (const TensorView& w : clf_->weight_storage()) {
    values.emplace_back(w.dtype, w.shape);
    copy(values.back().view(), w);
  }
  HostTensor m(DType::F32, adamw_->exp_avg().shape), v(DType::F32, adamw_->exp_avg_sq().shape);
  copy(m.view(), adamw_->exp_avg());
  copy(v.view(), adamw_->exp_avg_sq());
  const StepScalarValues scalars = read_step_scalars(adamw_->step_scalars());
  set_plan_unit(smaller);
  spdlog::warn(
      "out of memory at step {} ({}); rebuilding the arena for micro-batch {} x {} "
      "(effective batch {} kept) and retrying the step",
      step + 1, e.what(), unit_text(smaller), accumulation(), effective_);
  build();
  const std::vector<TensorView> storage = clf_->weight_storage();
  for (size_t i = 0; i < storage.size(); ++i) copy(storage[i], values[i].view());
  copy(adamw_->exp_avg(), m.view());
  copy(adamw_->exp_avg_sq(), v.view());
  write_step_scalars(adamw_->step_scalars(), scalars);
  clf_->frozen_weights_changed();
}

void SingleDeviceStep::set_micro_batch(int64_t rows, int64_t step) {
  FTUNE_ASSERT(rows >= 1 && rows <= clf_->options().max_batch,
               "micro-batch of {} rows; the arena is planned for 1 to {}", rows,
               clf_->options().max_batch);
  if (rows == micro_batch_) return;
  micro_batch_ = rows;
  spdlog::info("micro-batch {} rows from step {}: {} micro-batches for the effective batch {}",
               rows, step + 1, accumulation(), effective_);
}

void SingleDeviceStep::prepare_batch(Batch& step_batch) const {
  // Padded by the run's rule (within the planned length), so micro-batches come in few shapes
  // (CUDA graphs, cuDNN plans); the padding is masked, so it changes results only through the
  // order of sums.
  pad_to_length(step_batch, pad_.length(step_batch.seq_len, clf_->options().max_seq), pad_id_);
}

std::vector<std::pair<int64_t, int64_t>> SingleDeviceStep::micro_batch_cuts_of(
    const Batch& step_batch) const {
  // Contiguous rows of the step batch (data-parallel: of this rank's rows, which may be none):
  // micro_batch_ rows each, or packed up to micro_tokens_. Listwise: whole groups on every rank
  // and in every micro-batch (also after an out-of-memory halving).
  const auto [first_row, end_row] = sync_->rows(step_batch.size, group_rows(loss_));
  return micro_batch_cuts(step_batch, layout(), micro_batch_, micro_tokens_, first_row, end_row,
                          group_rows(loss_));
}

StepOutcome SingleDeviceStep::step(const Batch& step_batch, const StepRequest& request) {
  validate_batch(model_, step_batch);  // every micro-batch is a cut of it
  positions_ = position_ids(model_, step_batch);
  const StepFaults faults(hooks_, request.step, oom_retries_.empty());
  const TensorView scalars = adamw_->step_scalars();
  const MicroBatchSetup setup{model_, *clf_, *staging_, graphs_.get(), *sync_,
                              loss_,  tc_.seed, stream_seq_};
  MicroBatchPasses passes(setup, step_batch, positions_, micro_batch_cuts_of(step_batch),
                          request.step, scaler_.scale(), scalars, faults);
  passes.begin();  // gradients and step loss zeroed, the first micro-batch's inputs staged
  sync_->run([&] { passes.run(request.micro_batches); }, step_scalars_data(scalars) + kStepLoss,
             can_halve());
  work_ += passes.work();
  tail_->run(request.lr);
  StepOutcome outcome;
  outcome.micro_batches = passes.passes();
  if (scaler_.enabled()) outcome.skipped_steps = tail_->follow_loss_scale(request.step);
  if (request.step == 0) after_first_step();
  return outcome;
}

void SingleDeviceStep::after_first_step() {
  if (plan_.target.device.is_cpu()) return;
  spdlog::info("gemm autotune after the first step: {}", gemm_autotune_report());
  gemm_autotune_save();  // the shapes timed so far, for every later process
}

void SingleDeviceStep::sample_device_memory() {
  if (!plan_.target.device.is_cpu())
    min_free_ = std::min(min_free_, device_memory_info(plan_.target.device).available);
}

}  // namespace ftune
