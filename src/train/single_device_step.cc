// The single-device step strategy (see single_device_step.h).
//
// Determinism, and independence from the micro-batch size: the step batch's rows are ordered by
// length; the step cuts them into contiguous micro-batches of at most micro_batch_ rows (the last
// may be smaller), each padded only to its own longest row (or packed up to micro_tokens_). Each
// micro-batch's backward is scaled by its share of the step's loss (rows, or with class weights
// the sum of its rows' label weights, over the step's), so the gradient is that of the mean loss
// over the whole step batch. Dropout masks are Philox streams keyed by (seed, site, s) and
// indexed by a row's place in the step batch and its token position (DropoutPlan: row0 = the
// micro-batch's first row, stream_seq = Tv = data.max_length clipped to the model's positions, a
// run constant), so they do not depend on how the step is cut. A run with micro-batch m and
// accumulation a thus follows the trajectory of any (m', a') with m'a' = ma, up to float
// summation order, and set_micro_batch() may change m between steps (the out-of-memory
// fallback) without changing what is computed.
//
// No host round trip per step (DESIGN principle 4): the step's loss, gradient norm, clip factor,
// non-finite check, skip counters and AdamW's t live on the device (optim/step_scalars.h); the run
// loop reads them once per logging interval. The inputs of each micro-batch are staged in pinned
// host memory and copied on the copy stream while the previous micro-batch computes
// (train/input_staging.h).
#include "train/single_device_step.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>

#include "core/memory.h"
#include "core/op_profile.h"
#include "data/token_batch.h"
#include "models/batch.h"
#include "ops/backend_context.h"
#include "optim/layer_decay.h"
#include "optim/step_scalars.h"
#include "train/gpu_paths_report.h"

namespace ftune {
namespace {

// Why packed micro-batches are not captured (summary.json cuda_graphs.packed_micro_batches): a
// graph replays fixed kernel arguments, and a packed micro-batch's token and row counts differ
// from one micro-batch to the next (filled with whole rows up to the token budget), so a graph
// keyed by them would almost never be replayed.
constexpr const char* kPackedEager =
    "packed micro-batches run eagerly (their token and row counts vary from one to the next; the "
    "optimizer step is still graphed)";

// Executable CUDA graphs kept at most (train/step_graphs.h): (rows, padded length) keys of a GPU
// run's length buckets up to 512 tokens are 20 per micro-batch size.
constexpr int64_t kMaxStepGraphs = 256;
// The optimizer tail's graph (gradient norm, finish, AdamW): no micro-batch has 0 rows.
constexpr MicroGraphKey kOptimizerGraphKey{0, 0};

// The denominator of the mean cross-entropy over labels [begin, end) (ops/cross_entropy.h): the
// number of counted rows, or with class weights the sum of their label weights; in the same order
// and precision as the loss op sums it.
double loss_weight(const std::vector<int32_t>& labels, size_t begin, size_t end,
                   const std::vector<float>& class_weights) {
  double total = 0.0;
  for (size_t i = begin; i < end; ++i)
    if (labels[i] >= 0) total += class_weights.empty() ? 1.0f : class_weights[labels[i]];
  return total;
}

// Rows of a query group in a listwise / margin_mse run (1: rows stand alone).
int64_t group_rows(const LossOptions& loss) {
  return std::max<int64_t>(1, loss.listwise_group_size);
}

// Rows of a full step batch: the effective batch counts groups in a listwise / margin_mse run.
int64_t step_rows(const TrainConfig& config, const LossOptions& loss) {
  return config.effective_batch() * group_rows(loss);
}

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
      reducer_(reducer),
      effective_(reducer ? reducer->most_rows(step_rows(config, loss), group_rows(loss))
                         : step_rows(config, loss)),
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
                 cuda_graphs_.on && micro_tokens_ > 0 ? fmt::format("; {}", kPackedEager) : "");
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
        staged_target_width(plan_.target));
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
  if (reducer_) reducer_->plan(clf_->trainable_params(), clf_->trainable_grads());
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

StepOutcome SingleDeviceStep::step(const Batch& step_batch, const StepRequest& request) {
  const int64_t s = request.step;
  validate_batch(model_, step_batch);  // every micro-batch is a cut of it
  positions_ = position_ids(model_, step_batch);
  const size_t rows_total = static_cast<size_t>(step_batch.size);
  const double step_weight = loss_weight(step_batch.labels, 0, rows_total, loss_.class_weights);
  const TensorView scalars = adamw_->step_scalars();
  clf_->zero_grad();
  step_scalars_begin(scalars);
  // The step's loss is the mean over all its rows: micro-batch k's mean loss weighs
  // W_k / W_step (its share of the loss's denominator), in the loss and in its backward; the
  // device accumulates it (step_scalars.h). Micro-batch k + 1's inputs are staged (host work and
  // an asynchronous copy) once k's kernels are queued, so they overlap k's compute.
  const bool inject_nonfinite = hooks_.nonfinite_at(s + 1);
  const float loss_scale = scaler_.scale();  // 1 unless fp16
  // What differs between micro-batches, staged with their inputs (read on the device, so a CUDA
  // graph replays any micro-batch of its shape: train/step_graphs.h).
  const auto micro_params = [&](int64_t row0, int64_t rows) {
    const double share = loss_weight(step_batch.labels, static_cast<size_t>(row0),
                                     static_cast<size_t>(row0 + rows), loss_.class_weights) /
                         step_weight;
    MicroParams m;
    m.row0 = static_cast<uint64_t>(row0);
    m.offset = static_cast<uint32_t>(s);
    m.grad_scale = static_cast<float>(share) * loss_scale;
    m.loss_share = inject_nonfinite && row0 == 0 ? std::nan("") : share;
    return m;
  };
  int64_t micro_batches = request.micro_batches;
  // Contiguous rows of the step batch (data-parallel: of this rank's rows, which may be none):
  // micro_batch_ rows each, or packed up to micro_tokens_.
  const auto [first_row, end_row] =
      reducer_ ? reducer_->rows(step_batch.size, group_rows(loss_))
               : std::pair<int64_t, int64_t>{0, step_batch.size};
  // Listwise: whole groups on every rank and in every micro-batch (also after an out-of-memory
  // halving).
  const std::vector<std::pair<int64_t, int64_t>> cuts =
      micro_batch_cuts(step_batch, layout(), micro_batch_, micro_tokens_, first_row, end_row,
                       group_rows(loss_));
  int slot = cuts.empty() ? 0
                          : staging_->stage(step_batch, positions_, cuts[0].first, cuts[0].second,
                                            micro_params(cuts[0].first, cuts[0].second));
  TrainingWork step_work;
  const auto micro_batch_passes = [&] {
    for (size_t cut = 0; cut < cuts.size(); ++cut) {
      if (micro_batches == hooks_.exit_at_micro_step) exit_as_killed();
      const auto [row0, rows] = cuts[cut];
      const StagedInputs in = staging_->acquire(slot);
      clf_->use_inputs(in.inputs, in.labels, in.targets);
      step_work.add(flop_model(model_), step_batch, row0, rows, in.inputs.T, in.inputs.packed());
      const DropoutPlan dropout{true, tc_.seed, static_cast<uint32_t>(s),
                                static_cast<uint64_t>(row0), stream_seq_, in.micro};
      clf_->prepare_forward(loss_);  // nothing lazy left inside the region
      const bool last = cut + 1 == cuts.size();
      const bool inject_oom = s + 1 == hooks_.oom_at_step && oom_retries_.empty() &&
                              (hooks_.oom_after_backward ? last : cut == 0);
      // Data-parallel: the last backward's finished layers start their gradients' reduction
      // (eagerly run: a replayed graph runs no host code to say when a layer is done).
      const bool overlap = reducer_ && last;
      if (overlap) reducer_->arm();
      const auto region = [&] {
        clf_->forward(dropout);
        if (inject_oom && !hooks_.oom_after_backward)
          throw OutOfMemoryError("FTUNE_DEBUG_OOM_AT_STEP: injected allocation failure");
        const TensorView micro_loss = clf_->loss(loss_);
        step_scalars_add_loss(scalars, micro_loss, 0.0, &in.micro->loss_share);
        clf_->backward(dropout, 1.0f, &in.micro->grad_scale);
        if (inject_oom && hooks_.oom_after_backward)
          throw OutOfMemoryError(
              "FTUNE_DEBUG_OOM_AT_STEP: injected allocation failure after the last backward");
      };
      // A replayed graph runs none of the region's host code: the injected failure runs eagerly.
      // Packed micro-batches run eagerly (kPackedEager); the step's optimizer tail is still
      // graphed.
      if (graphs_ && !inject_oom && !in.inputs.packed() && !overlap)
        graphs_->run(MicroGraphKey{rows, in.inputs.T}, region);
      else
        region();
      if (!last) {
        const auto [next0, next] = cuts[cut + 1];
        slot = staging_->stage(step_batch, positions_, next0, next, micro_params(next0, next));
      }
      ++micro_batches;
    }
  };
  if (!reducer_) {
    micro_batch_passes();
  } else {
    // Data-parallel: every rank's gradients (most of them already, during the last backward) and
    // step loss summed, so what follows is the same on every rank. A failure of this rank's
    // passes still starts every bucket, and the ranks agree on the step: all fall back to a
    // smaller micro-batch (OutOfMemoryError on every rank), or all stop naming the rank.
    RankFailure failure;
    try {
      micro_batch_passes();
    } catch (const OutOfMemoryError& e) {
      failure = {RankFailure::kOutOfMemory, e.what()};
    } catch (const std::exception& e) {
      failure = {RankFailure::kError, e.what()};
    }
    reducer_->finish(step_scalars_data(scalars) + kStepLoss, failure, can_halve());
  }
  work_ += step_work;
  // Norm, clip factor and the finite check on the device; AdamW applies the step or, when the
  // loss or the norm is not finite, touches nothing (the counters move on the device). fp16: the
  // gradients are S times too large; the device unscales the norm and the clip coefficient.
  // Mixed precision: AdamW writes the 16-bit weight shadow in its pass where it can (full
  // fine-tuning); otherwise the model recasts it before the next forward. The scheduled learning
  // rate goes to the device first (one small kernel), so the tail's launches take the same
  // arguments every step and, with CUDA graphs, replay as one graph (not in fp16, whose loss
  // scale changes the arguments).
  const SequenceClassifier::OptimizerShadow shadow = clf_->optimizer_shadow();
  adamw_->set_learning_rate(static_cast<float>(request.lr));
  const auto tail = [&] {
    step_scalars_finish(scalars, clf_->trainable_grads(), tc_.max_grad_norm,
                        tc_.max_nonfinite_steps, loss_scale,
                        scaler_.enabled() && !scaler_.exhausted());
    adamw_->apply_scheduled(clf_->trainable_values(), clf_->trainable_grads(), shadow.view,
                            shadow.offset);
  };
  if (graphs_ && !scaler_.enabled())
    graphs_->run(kOptimizerGraphKey, tail);
  else
    tail();
  clf_->weights_updated(shadow.view.defined());
  StepOutcome outcome;
  outcome.micro_batches = micro_batches - request.micro_batches;
  if (scaler_.enabled()) outcome.skipped_steps = follow_loss_scale(s);
  if (s == 0 && !plan_.target.device.is_cpu()) {
    spdlog::info("gemm autotune after the first step: {}", gemm_autotune_report());
    gemm_autotune_save();  // the shapes timed so far, for every later process
  }
  return outcome;
}

// fp16 only: the host keeps the loss scale, so it reads the step's outcome after every step (one
// small read per step; bf16 and fp32 steps make none). An overflow at the current scale halves it
// and is logged here; a real divergence (non-finite loss, or gradients once the scale is
// exhausted) is left to the run loop's warning and abort. Returns the skip count after an
// overflow (the run loop does not warn about that skip again).
std::optional<int64_t> SingleDeviceStep::follow_loss_scale(int64_t step) {
  const StepScalarValues v = read_step_scalars(adamw_->step_scalars());
  const float scale = scaler_.scale();
  if (v[kScaleOverflow] != 0.0) {
    scaler_.update(std::numeric_limits<double>::infinity());
    spdlog::info("step {}: fp16 gradients overflow at loss scale {}; step skipped, scale now {}",
                 step + 1, scale, scaler_.scale());
    return static_cast<int64_t>(v[kSkippedSteps]);
  }
  if (v[kStepOk] != 0.0) scaler_.update(v[kGradNorm] * scale);
  return std::nullopt;
}

void SingleDeviceStep::sample_device_memory() {
  if (!plan_.target.device.is_cpu())
    min_free_ = std::min(min_free_, device_memory_info(plan_.target.device).available);
}

nlohmann::json SingleDeviceStep::report() const {
  nlohmann::json s;
  s["tf32"] = tf32_.on;
  s["pad_to_multiple_of"] = pad_.multiple;
  s["padding"] = pad_.describe();
  nlohmann::json g{{"on", cuda_graphs_.on}, {"why", cuda_graphs_.why}};
  if (cuda_graphs_.on && micro_tokens_ > 0) g["packed_micro_batches"] = kPackedEager;
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
  if (reducer_) s["data_parallel"] = reducer_->report();
  return s;
}

}  // namespace ftune
