// Training run (see trainer.h). The Trainer owns the order of operations of a step; evaluation,
// checkpoints and logging hang off step boundaries. Everything the step touches was planned into
// one arena before the first step.
//
// Determinism, and independence from the micro-batch size: optimizer step s trains on batch
// s % S of epoch s / S of the length-bucketed batcher, which cuts the effective batch
// (batch_size x gradient_accumulation rows; S = ceil(N / effective) steps per epoch, the last one
// of an epoch may be smaller). The step batch's rows are ordered by length; the step cuts them
// into contiguous micro-batches of at most micro_batch_ rows (the last may be smaller), each
// padded only to its own longest row. Each micro-batch's backward is scaled by its share of the
// step's loss (rows, or with class weights the sum of its rows' label weights, over the step's),
// so the gradient is that of the mean loss over the whole step batch. Dropout masks are Philox
// streams keyed by (seed, site, s) and indexed by a row's place in the step batch and its token
// position (DropoutPlan: row0 = the micro-batch's first row, stream_seq = Tv = data.max_length
// clipped to the model's positions, a run constant), so they do not depend on how the step is cut.
// A run with micro-batch m and accumulation a thus follows the trajectory of any (m', a') with
// m'a' = ma, up to float summation order, and set_micro_batch() may change m between steps (the
// out-of-memory fallback) without changing what is computed. The step s is the data cursor: a
// checkpoint records s, the micro-batch size in use, the optimizer moments and the
// early-stopping state, so a resumed run replays exactly the same arithmetic as an uninterrupted
// one (same thread count).
//
// No host round trip per step (DESIGN principle 4): the step's loss, gradient norm, clip factor,
// non-finite check, skip counters and AdamW's t live on the device (train/step_scalars.h) and the
// host reads them once per logging interval (training.log_every) and at evaluation, checkpoint,
// interrupt and end of run. A run of training.max_nonfinite_steps non-finite steps in a row is
// therefore reported at the next read, up to log_every steps late; from the step that reached the
// limit on, the device applies nothing, so the weights and moments are those from before that run.
// The inputs of each micro-batch are staged in pinned host memory and copied on the copy stream
// while the previous micro-batch computes (train/input_staging.h).
#include "train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/memory.h"
#include "core/op_profile.h"
#include "core/thread_pool.h"
#include "cuda/nvml.h"
#include "data/batcher.h"
#include "data/prefetcher.h"
#include "io/atomic_file.h"
#include "io/dir_lock.h"
#include "io/fingerprint.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "data/token_batch.h"
#include "models/batch.h"
#include "models/hf_checkpoint.h"
#include "models/adapters.h"
#include "models/peft_adapter.h"
#include "ops/backend_context.h"
#include "train/adamw.h"
#include "train/checkpoint_store.h"
#include "train/early_stopping.h"
#include "train/evaluate.h"
#include "train/flops.h"
#include "train/gpu_paths_report.h"
#include "train/grad_clip.h"
#include "train/input_staging.h"
#include "train/layer_decay.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/batch_plan.h"
#include "train/progress.h"
#include "train/run_log.h"
#include "train/step_graphs.h"
#include "train/step_scalars.h"
#include "train/stop_signal.h"
#include "train/train_data.h"
#include "train/trainer_state.h"

namespace ftune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Executable CUDA graphs kept at most (train/step_graphs.h): (rows, padded length) keys of a GPU
// run's length buckets up to 512 tokens are 20 per micro-batch size.
constexpr int64_t kMaxStepGraphs = 256;
// The optimizer tail's graph (gradient norm, finish, AdamW): no micro-batch has 0 rows.
constexpr MicroGraphKey kOptimizerGraphKey{0, 0};

const std::vector<std::string> kTokenizerFiles = {
    "tokenizer.json", "tokenizer_config.json",   "special_tokens_map.json",
    "vocab.txt",      "sentencepiece.bpe.model", "merges.txt",
    "vocab.json",     "added_tokens.json"};

void copy_tokenizer_files(const std::string& from, const std::string& to) {
  for (const std::string& name : kTokenizerFiles) {
    const fs::path src = fs::path(from) / name;
    if (fs::exists(src))
      io::write_file_atomic((fs::path(to) / name).string(), io::read_file(src.string()));
  }
}

// Fills `dst` through `dst`.tmp, renamed into place; a failure (a full disk) removes the
// temporary directory before the error goes on, so nothing half-written stays behind.
void publish_dir(const std::string& dst, const std::function<void(const std::string&)>& fill) {
  const std::string tmp = dst + ".tmp";
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp);
    fill(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(dst);
  fs::rename(tmp, dst);
}

// Hard links (or copies, across file systems) the HF model files of a checkpoint into `dst`.
void publish_model(const std::string& checkpoint, const std::string& dst) {
  publish_dir(dst, [&](const std::string& tmp) {
    for (const auto& item : fs::directory_iterator(checkpoint)) {
      const std::string name = item.path().filename().string();
      if (name == "trainer_state.json" || name == "optimizer.safetensors") continue;
      std::error_code ec;
      fs::create_hard_link(item.path(), fs::path(tmp) / name, ec);
      if (ec) fs::copy_file(item.path(), fs::path(tmp) / name);
    }
  });
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Fault injection for the tests: FTUNE_DEBUG_EXIT_AT_MICRO_STEP=m ends the process like kill -9
// just before micro-batch m (counted over the run); FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT=s does so
// right after the checkpoint of step s is saved; FTUNE_DEBUG_SIGTERM_AT_STEP=s sends SIGTERM
// to itself after optimizer step s; FTUNE_DEBUG_MICRO_BATCH_AT_STEP=s:m switches to micro-batches
// of m rows from optimizer step s on, as the out-of-memory fallback would.
int64_t debug_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : -1;
}

std::pair<int64_t, int64_t> debug_micro_batch_change() {
  const char* v = std::getenv("FTUNE_DEBUG_MICRO_BATCH_AT_STEP");
  long long step = -1, rows = 0;
  if (!v || std::sscanf(v, "%lld:%lld", &step, &rows) != 2) return {-1, 0};
  return {step, rows};
}

// FTUNE_DEBUG_NONFINITE_STEPS=list: the loss of these optimizer steps (1-based; "3", "3,7",
// "4-6") is made NaN on the device, as a diverging step would be (tests of the skip policy).
bool debug_nonfinite_step(int64_t step) {
  static const std::vector<std::pair<int64_t, int64_t>> ranges = [] {
    std::vector<std::pair<int64_t, int64_t>> r;
    const char* v = std::getenv("FTUNE_DEBUG_NONFINITE_STEPS");
    std::string text = v ? v : "";
    size_t at = 0;
    while (at < text.size()) {
      const size_t end = std::min(text.find(',', at), text.size());
      const std::string item = text.substr(at, end - at);
      long long a = 0, b = 0;
      if (std::sscanf(item.c_str(), "%lld-%lld", &a, &b) == 2)
        r.push_back({a, b});
      else if (std::sscanf(item.c_str(), "%lld", &a) == 1)
        r.push_back({a, a});
      at = end + 1;
    }
    return r;
  }();
  for (const auto& [a, b] : ranges)
    if (step >= a && step <= b) return true;
  return false;
}

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

// The configuration sections that determine the arithmetic of a run, canonically serialised:
// resume refuses when they differ (threads, logging and prefetch depth do not change results).
std::string trajectory_config(const YAML::Node& resolved) {
  YAML::Node n;
  for (const char* section : {"model", "data", "training", "preset", "peft"})
    if (resolved[section]) n[section] = YAML::Clone(resolved[section]);
  if (n["training"]) {
    for (const char* k : {"threads", "log_every", "prefetch", "max_nonfinite_steps", "cuda_graphs"})
      n["training"].remove(k);
  }
  YAML::Emitter out;
  out << n;
  return out.c_str();
}

std::vector<std::string> model_files(const std::string& dir) {
  std::vector<std::string> names = {"config.json", "model.safetensors.index.json"};
  std::vector<std::string> shards;
  for (const auto& item : fs::directory_iterator(dir))
    if (item.path().extension() == ".safetensors") shards.push_back(item.path().filename());
  std::sort(shards.begin(), shards.end());
  names.insert(names.end(), shards.begin(), shards.end());
  return names;
}

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, const TrainOptions& options)
      : cfg_(cfg), tc_(cfg.training), options_(options), run_(cfg.output.dir) {}

  nlohmann::json run();

  // Micro-batches of `rows` rows from the next optimizer step on (1 <= rows <= the planned
  // max_batch); the effective batch, and so the trajectory, stay the same. A step that threw
  // part-way (an allocation failure) is retried whole by the next train_step(), on the same batch.
  void set_micro_batch(int64_t rows);
  int64_t micro_batch() const { return micro_batch_; }
  // Micro-batches per step (packed: at most, for rows of the planned longest length).
  int64_t accumulation() const {
    const int64_t rows = micro_tokens_ > 0 ? micro_tokens_ / plan_.target.max_seq : micro_batch_;
    return (effective_ + rows - 1) / std::max<int64_t>(rows, 1);
  }

 private:
  void check_run_dir() const;  // before any work: refuses to clobber or to resume nothing
  void prepare_run_dir();      // after data and model loaded: clears (overwrite), writes config
  void load_data_and_model();
  void plan_batch();             // micro-batch, accumulation and checkpointing from the planner
  void build_model_and_arena();  // the model and optimizer over one arena (OOM: halves the batch)
  // An allocation failed during a step: halve the micro-batch, rebuild the arena for it with the
  // trained state kept, so the step can be retried (same effective batch, same trajectory).
  void shrink_micro_batch(const OutOfMemoryError& e);
  // The micro-batch size in the planner's unit (rows, or packed tokens), whether it can halve,
  // halving it, and how the log names it.
  int64_t plan_unit() const { return micro_tokens_ > 0 ? micro_tokens_ : micro_batch_; }
  bool can_halve() const {
    return micro_tokens_ > 0 ? micro_tokens_ > plan_.target.max_seq : micro_batch_ > 1;
  }
  int64_t halved() const {
    return micro_tokens_ > 0 ? std::max((micro_tokens_ + 1) / 2, plan_.target.max_seq)
                             : (micro_batch_ + 1) / 2;
  }
  void set_plan_unit(int64_t m) {
    if (micro_tokens_ > 0) {
      micro_tokens_ = m;
      micro_batch_ = std::min(micro_batch_, packed_rows(plan_.target, m));
    } else {
      micro_batch_ = m;
    }
  }
  std::string unit_text(int64_t m) const {
    return micro_tokens_ > 0 ? fmt::format("{} tokens", m) : std::to_string(m);
  }
  // GPU runs: the lowest free device memory seen (cudaMemGetInfo), for planned vs measured.
  void sample_device_memory() {
    if (!plan_.target.device.is_cpu())
      min_free_ = std::min(min_free_, device_memory_info(plan_.target.device).available);
  }
  void plan_schedule();
  nlohmann::json fingerprints() const;
  void restore(const CheckpointEntry& ckpt);
  void train_step();
  // FTUNE_PROFILE_OPS: the per-op table of the profiled step, logged and written to op_profile.json.
  void write_op_profile(const profile::StepProfile& p) const;
  // The host's read of the step scalars: updates the skip counters, warns about skipped steps and
  // throws when the device latched the non-finite abort.
  StepScalarValues sync_step_scalars();
  void follow_loss_scale();
  nlohmann::json run_eval(const TokenizedSplit& split, const char* name);
  void save_checkpoint(bool best);
  void write_checkpoint(const std::string& dir, const StepScalarValues& scalars);
  void load_weights_from(const std::string& checkpoint);  // model or adapter of a checkpoint
  nlohmann::json summary(const std::string& status) const;
  int64_t epoch_of(int64_t step) const { return step / steps_per_epoch_; }

  // The run directory's lock (io/dir_lock.h): taken before anything there is read or written,
  // released last (declared first, destroyed last).
  std::optional<io::DirLock> lock_;
  const TrainConfig& cfg_;
  const TrainConfig::Training& tc_;
  TrainOptions options_;
  fs::path run_;
  Clock::time_point t_start_ = Clock::now();

  std::optional<text::Tokenizer> tok_;
  TrainData data_;
  ModelSpec model_;  // the model's family and config (models/backbone.h), with the task's labels
  LoadReport load_report_;
  std::unique_ptr<SequenceClassifier> clf_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<InputStaging> staging_;  // double-buffered micro-batch inputs
  ResolvedCudaGraphs cuda_graphs_;          // training.cuda_graphs for the run's device
  std::unique_ptr<StepGraphs> graphs_;      // the micro-batch graphs (GPU runs with graphs on)
  PadRule pad_;                             // training.pad_to_multiple_of, resolved
  ResolvedTf32 tf32_;  // TF32 for the fp32 GEMMs (a GPU setting)
  LossScaler scaler_;  // fp16: dynamic loss scaling (disabled otherwise: S = 1)
  std::unique_ptr<Arena> arena_;
  RunBatchPlan plan_;
  GradientCheckpointing checkpointing_ = GradientCheckpointing::Off;
  nlohmann::json oom_retries_ = nlohmann::json::array();
  size_t free_before_run_ = 0, min_free_ = SIZE_MAX;  // device memory (GPU runs)
  LossOptions loss_options_;
  int32_t pad_id_ = 0;
  int64_t eval_batch_ = 0;

  std::unique_ptr<data::LengthBucketedBatcher> batcher_;  // step batches of effective_ rows
  int64_t effective_ = 1, steps_per_epoch_ = 1, total_steps_ = 0;
  int64_t micro_batch_ = 1;  // rows per forward pass; set_micro_batch() changes it between steps
  // Packed micro-batches (data.packing): the token budget of one (0: padded); micro_batch_ then
  // bounds its rows.
  int64_t micro_tokens_ = 0;
  BatchLayout layout() const { return micro_tokens_ > 0 ? BatchLayout::Packed : BatchLayout::Padded; }
  // data.max_length clipped to the model's positions: Tv of the dropout streams (a run constant)
  // and the planner's worst-case sequence length.
  int64_t stream_seq_ = 0;
  LrSchedule schedule_;
  std::unique_ptr<data::BatchPrefetcher> prefetch_;  // step batches assembled ahead of the step
  Batch step_batch_;                                 // the batch of step step_batch_of_
  int64_t step_batch_of_ = -1;
  std::vector<int32_t> step_positions_;  // position ids of step_batch_

  std::unique_ptr<EarlyStopping> early_;
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<RunLog> log_;
  std::string eval_metric_;
  // GPU runs: NVML utilisation / memory / power sampling (progress bar, summary.json "gpu").
  // Declared before progress_, which calls it, so it outlives the bar.
  std::unique_ptr<cuda::NvmlSampler> gpu_sampler_;
  std::unique_ptr<ProgressBar> progress_;
  int64_t samples_at_start_ = 0, tokens_at_start_ = 0;

  // Resumable state (trainer_state.json).
  // step_ is the data cursor; micro_batches_ counts forward passes (fault injection, reports).
  int64_t step_ = 0, micro_batches_ = 0, samples_ = 0, tokens_ = 0, skipped_ = 0,
          nonfinite_in_row_ = 0;
  double train_seconds_ = 0, wait_seconds_ = 0;
  nlohmann::json best_eval_, last_eval_;
  // "completed", or what stopped the run early ("early_stopping", "hook"): a resumed run that
  // had stopped does not train on.
  std::string stopped_by_ = "completed";

  // Logging window (its loss sum is on the device: kWindowLoss). Saved in checkpoints, so the
  // first line logged after a resume is the uninterrupted run's.
  int64_t window_steps_ = 0, window_samples_ = 0, window_tokens_ = 0;
  Clock::time_point window_start_ = Clock::now();
  double window_restored_seconds_ = 0;  // the window's training time before the resume
  double shown_loss_ = 0;  // the progress bar's loss: the last logged window's mean
  const int64_t step_scalar_reads_at_start_ = step_scalar_reads();
  const int64_t host_scalar_reads_at_start_ = host_scalar_reads();
  const GpuPathCounts gpu_paths_at_start_ = gpu_path_counts();  // summary.json "gpu_paths"
  int64_t saved_step_ = -1;
  TrainingWork work_;  // micro-batches computed by this process (FLOPs, padded / real tokens)
};

void Trainer::check_run_dir() const {
  const bool exists = fs::exists(run_ / "checkpoints") || fs::exists(run_ / "summary.json") ||
                      fs::exists(run_ / "metrics.jsonl");
  if (options_.resume) {
    if (!fs::exists(run_ / "checkpoints" / "index.json"))
      throw InputError(fmt::format(
          "{}: no checkpoint to resume from (checkpoints/index.json is missing)", run_.string()));
  } else if (exists && !cfg_.output.overwrite) {
    throw InputError(
        fmt::format("output.dir {} already holds a run; pass --resume to continue it or set "
                    "output.overwrite=true to replace it",
                    run_.string()));
  }
}

void Trainer::prepare_run_dir() {
  if (!options_.resume && fs::exists(run_)) {
    for (const char* name : {"checkpoints", "model", "adapter", "summary.json", "metrics.jsonl"})
      fs::remove_all(run_ / name);
    for (const auto& item : fs::directory_iterator(run_))
      if (item.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
        fs::remove(item.path());
  }
  fs::create_directories(run_);
  YAML::Emitter out;
  out << cfg_.resolved;
  io::write_file_atomic((run_ / "config.yaml").string(), std::string(out.c_str()) + "\n");
}

void Trainer::load_data_and_model() {
  tok_.emplace(load_run_tokenizer(cfg_));
  LoadOptions load;
  load.reinit_mismatched_head = true;
  load.init_seed = tc_.seed;
  if (cfg_.peft.enabled()) {
    // PEFT's reading of target_modules on this model, before the data is read: a target ftune
    // cannot adapt fails here; the modules adapted are logged.
    const ModelSpec base = load_model_spec(cfg_.model.path, {});
    const std::vector<std::string> adapted =
        resolve_target_modules(cfg_.peft, base.backbone().modules(), "peft");
    spdlog::info("peft: adapters on {} modules, {} to {}", adapted.size(), adapted.front(),
                 adapted.back());
  }
  // Labels come from the data unless the config names them; the head is sized to match.
  const int64_t max_length = usable_max_length(cfg_);
  data_ = load_train_data(cfg_, *tok_, max_length);
  stream_seq_ = max_length;  // every sequence is truncated to it, so it bounds every T
  load.labels = data_.labels.names;
  model_ = load_model_spec(cfg_.model.path, load)
               .with_dropout({static_cast<float>(tc_.hidden_dropout),
                              static_cast<float>(tc_.attention_dropout),
                              static_cast<float>(tc_.classifier_dropout)});

  plan_batch();
  build_model_and_arena();
  load_report_ = load_model_weights(*clf_, cfg_.model.path, load);
  if (clf_->adapters_on()) {
    clf_->init_adapters(tc_.seed);  // PEFT's initialisation; a resume loads the saved adapter
    spdlog::info("{}: {} trainable parameters ({:.2f}% of {}), gradient checkpointing {}",
                 peft_method_name(cfg_.peft.method), clf_->trainable_params().total(),
                 100.0 * clf_->trainable_params().total() / clf_->params().total(),
                 clf_->params().total(),
                 gradient_checkpointing_name(checkpointing_));
  }
  loss_options_.label_smoothing = static_cast<float>(tc_.label_smoothing);
  loss_options_.class_weights = resolve_class_weights(tc_, data_.labels.names);
  pad_id_ = static_cast<int32_t>(model_.info().pad_token_id);
}

void Trainer::plan_batch() {
  BatchPlanOptions options;
  options.device = training_device(cfg_);  // the arena, and so every op, lives there
  if (options_.resume) {
    // A resumed run continues with the micro-batch and checkpointing it was using (the budget
    // may differ now); an allocation failure still halves it.
    if (const auto last = CheckpointStore(run_.string(), cfg_.checkpoint.keep_last).last()) {
      const TrainerState s =
          read_trainer_state((fs::path(last->dir) / "trainer_state.json").string());
      options.micro_batch = s.micro_batch;
      options.micro_tokens = s.micro_tokens;
      options.checkpointing =
          s.gradient_checkpointing ? GradientCheckpointing::On : GradientCheckpointing::Off;
    }
  }
  plan_ = plan_run_batch(cfg_, model_, data_, stream_seq_, options);
  const BatchChoice& c = plan_.choice;
  micro_batch_ = c.micro_batch;
  micro_tokens_ = c.micro_tokens;
  checkpointing_ = c.checkpointing;
  spdlog::info("micro-batches {} ({})", plan_.packing.on ? "packed" : "padded", plan_.packing.why);
  spdlog::info("precision {} ({})", precision_name(plan_.precision.precision),
               plan_.precision.reason);
  if (!plan_.target.device.is_cpu())
    spdlog::info("attention kernel {} ({})", attention_kernel_name(plan_.attention.kernel),
                 plan_.attention.reason);
  tf32_ = resolve_tf32(tc_.tf32, plan_.target.device, plan_.precision.precision);
  cuda_graphs_ = resolve_cuda_graphs(tc_.cuda_graphs, plan_.target.device);
  if (cuda_graphs_.on && profile::ops_enabled())  // a replayed graph has no op launches to time
    cuda_graphs_ = {false, "FTUNE_PROFILE_OPS times the ops of a step eagerly"};
  pad_ = resolve_padding(tc_.pad_to_multiple_of, plan_.target.device);
  if (!plan_.target.device.is_cpu())
    spdlog::info("CUDA graphs {} ({}); micro-batch padding: {}", cuda_graphs_.on ? "on" : "off",
                 cuda_graphs_.why, pad_.describe());
  // The ops follow the run's TF32 choice through one channel (the attention kernel travels
  // with the model's plan: ClassifierOptions::attention).
  set_backend_context(plan_.target.device, BackendContext{tf32_.on});
  if (!plan_.target.device.is_cpu())
    spdlog::info("TF32 for fp32 GEMMs {} ({})", tf32_.on ? "on" : "off", tf32_.reason);
  // fp16 scales the loss; FTUNE_DEBUG_LOSS_SCALE=s starts from 2^s (tests force overflows).
  static const int64_t scale_log2 = debug_env("FTUNE_DEBUG_LOSS_SCALE");
  LossScalerOptions so;
  so.enabled = plan_.precision.precision == Precision::FP16;
  if (scale_log2 >= 0) so.init_scale = std::ldexp(1.0f, static_cast<int>(scale_log2));
  scaler_ = LossScaler(so);
  spdlog::info("memory plan: {} ({} available on {} per {}; budget {} = {})", c.reason,
               format_bytes(plan_.memory.available), device_name(plan_.target.device),
               plan_.memory.source, format_bytes(c.budget), plan_.budget_source);
  if (c.over_budget)
    spdlog::warn(
        "micro-batch {} needs {} but the memory budget is {} (the largest that fits is {}); "
        "trying anyway: if the allocation fails the micro-batch halves",
        micro_batch_, format_bytes(c.planned_bytes), format_bytes(c.budget),
        std::max(c.fits_without_checkpointing, c.fits_with_checkpointing));
}

void Trainer::build_model_and_arena() {
  while (true) {
    eval_batch_ = cfg_.eval.batch_size > 0 ? cfg_.eval.batch_size : micro_batch_;
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
        clf_->options().packed ? clf_->options().max_tokens : 0);
    ArenaPlan plan;
    clf_->add_to_plan(plan);
    adamw_->add_to_plan(plan);
    staging_->add_to_plan(plan);
    const size_t bytes = plan.total_bytes();
    // Fault injection for the fallback's tests: FTUNE_DEBUG_ARENA_MEMORY=bytes lets the arena
    // take at most that much, as if another process held the rest of the device.
    static const int64_t arena_limit = debug_env("FTUNE_DEBUG_ARENA_MEMORY");
    const DeviceKind kind = plan_.target.device.kind;
    if (!plan_.target.device.is_cpu() && free_before_run_ == 0)
      free_before_run_ = device_memory_info(plan_.target.device).available;
    try {
      arena_.reset();
      if (arena_limit >= 0)
        set_device_memory_limit(kind, device_bytes_in_use(kind) + size_t(arena_limit));
      arena_ = std::make_unique<Arena>(plan_.target.device, std::move(plan));
      if (arena_limit >= 0) set_device_memory_limit(kind, std::nullopt);
    } catch (const OutOfMemoryError& e) {
      if (arena_limit >= 0) set_device_memory_limit(kind, std::nullopt);
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
          cfg_.effective_batch());
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
  for (const MemoryCategory& c : MemoryPlan::from(arena_->plan(), plan_.target.device).categories)
    if (c.bytes) plan_text += fmt::format(", {} {}", c.name, format_bytes(c.bytes));
  spdlog::info("arena: {} for micro-batches of {} tokens{} ({})", format_bytes(arena_->capacity()),
               micro_tokens_ > 0 ? fmt::format("{} packed", micro_tokens_)
                                 : fmt::format("{} x {}", micro_batch_, plan_.target.max_seq),
               eval_batch_ > micro_batch_ ? fmt::format(" (evaluation {})", eval_batch_) : "",
               plan_text.substr(2));
  clf_->bind(*arena_);
  adamw_->bind(*arena_);
  staging_->bind(*arena_);
  if (cuda_graphs_.on)
    graphs_ = std::make_unique<StepGraphs>(cuda_graph_backend(plan_.target.device), kMaxStepGraphs);
  if (tc_.layer_decay < 1.0)
    apply_layer_decay(*adamw_, clf_->trainable_params(), model_.info().num_layers,
                      tc_.layer_decay);
}

void Trainer::shrink_micro_batch(const OutOfMemoryError& e) {
  if (!can_halve())
    throw OutOfMemoryError(fmt::format("{} (at step {}, micro-batch {}: nothing left to halve)",
                                       e.what(), step_ + 1, unit_text(plan_unit())));
  const int64_t was = plan_unit(), smaller = halved();
  oom_retries_.push_back({{"step", step_ + 1},
                          {"micro_batch", was},
                          {"planned_bytes", arena_->capacity()},
                          {"error", e.what()},
                          {"retried_with", smaller}});
  // The trained state goes through host memory while the arena is rebuilt smaller.
  HostTensor values(DType::F32, clf_->param_values().shape);
  HostTensor m(DType::F32, adamw_->exp_avg().shape), v(DType::F32, adamw_->exp_avg_sq().shape);
  copy(values.view(), clf_->param_values());
  copy(m.view(), adamw_->exp_avg());
  copy(v.view(), adamw_->exp_avg_sq());
  const StepScalarValues scalars = read_step_scalars(adamw_->step_scalars());
  set_plan_unit(smaller);
  spdlog::warn(
      "out of memory at step {} ({}); rebuilding the arena for micro-batch {} x {} "
      "(effective batch {} kept) and retrying the step",
      step_ + 1, e.what(), unit_text(smaller), accumulation(), effective_);
  build_model_and_arena();
  copy(clf_->param_values(), values.view());
  copy(adamw_->exp_avg(), m.view());
  copy(adamw_->exp_avg_sq(), v.view());
  write_step_scalars(adamw_->step_scalars(), scalars);
  clf_->frozen_weights_changed();
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
    for (size_t i = 0; i < buffers.size(); ++i) {
      const char* category = MemoryPlan::category_of(buffers[i].name);
      const size_t bytes = arena.touched_bytes(i);
      touched[category] = touched.value(category, size_t{0}) + bytes;
      total += bytes;
    }
    j["touched_bytes"] = total;
    j["touched"] = touched;
  }
  return j;
}

void Trainer::plan_schedule() {
  effective_ = cfg_.effective_batch();
  batcher_ =
      std::make_unique<data::LengthBucketedBatcher>(&data_.train.examples, effective_, tc_.seed);
  steps_per_epoch_ = batcher_->batches_per_epoch();
  total_steps_ = tc_.max_steps > 0 ? tc_.max_steps : tc_.epochs * steps_per_epoch_;
  const int64_t warmup = tc_.warmup_steps > 0
                             ? tc_.warmup_steps
                             : static_cast<int64_t>(std::ceil(tc_.warmup_ratio * total_steps_));
  schedule_ = LrSchedule{parse_schedule_kind(tc_.schedule, "training.schedule"), tc_.learning_rate,
                         warmup, total_steps_};
  const bool binary = model_.num_labels() == 2;
  eval_metric_ = cfg_.eval.metric == "auto" ? "macro_f1" : cfg_.eval.metric;
  if (eval_metric_ == "roc_auc" && !binary)
    throw InputError("key 'eval.metric': roc_auc needs a binary task; this one has " +
                     std::to_string(model_.num_labels()) + " labels");
  const bool maximize = cfg_.eval.mode == "auto" ? eval_metric_ != "loss" : cfg_.eval.mode == "max";
  early_ = std::make_unique<EarlyStopping>(eval_metric_, maximize, cfg_.early_stopping.patience,
                                           cfg_.early_stopping.min_delta);
}

nlohmann::json Trainer::fingerprints() const {
  nlohmann::json f;
  f["model"] = io::directory_fingerprint(cfg_.model.path, model_files(cfg_.model.path));
  f["tokenizer"] = io::directory_fingerprint(cfg_.model.path, kTokenizerFiles);
  for (const std::string& file : data_.files) f["data"][file] = io::file_fingerprint(file);
  f["config"] = io::text_fingerprint(trajectory_config(cfg_.resolved));
  // The label set in id order: what the head's rows mean (it follows from the data and the
  // config, and from how ftune reads labels, which changed once: data/examples.h).
  f["labels"] = data_.labels.names;
  return f;
}

void Trainer::restore(const CheckpointEntry& ckpt) {
  const std::string state_path = (fs::path(ckpt.dir) / "trainer_state.json").string();
  const TrainerState s = read_trainer_state(state_path);
  const nlohmann::json now = fingerprints();
  const nlohmann::json& was = s.fingerprints;
  auto refuse = [&](const std::string& what) {
    throw InputError(fmt::format(
        "cannot resume from {}: {} changed since the checkpoint was written; start a new run "
        "(another output.dir, or output.overwrite=true)",
        ckpt.dir, what));
  };
  if (was.at("model") != now["model"]) refuse(fmt::format("the model in {}", cfg_.model.path));
  if (was.at("tokenizer") != now["tokenizer"])
    refuse(fmt::format("the tokenizer files in {}", cfg_.model.path));
  if (was.at("data") != now["data"]) {
    for (const auto& [file, fp] : now["data"].items())
      if (!was["data"].contains(file) || was["data"][file] != fp)
        refuse(fmt::format("the data file {}", file));
    refuse("the set of data files");
  }
  if (was.at("config") != now["config"])
    refuse("the configuration (model, data or training keys; see config.yaml of the run)");
  if (was.contains("labels") && was["labels"] != now["labels"])
    refuse(fmt::format("the label set (was [{}], now [{}])",
                       fmt::join(was["labels"].get<std::vector<std::string>>(), ", "),
                       fmt::join(data_.labels.names, ", ")));
  if (s.threads != compute_threads())
    spdlog::warn(
        "resuming with {} threads; the checkpoint was written with {}: results will "
        "not be bit-identical to an uninterrupted run",
        compute_threads(), s.threads);

  load_weights_from(ckpt.dir);
  const auto opt =
      io::SafetensorsFile::open((fs::path(ckpt.dir) / "optimizer.safetensors").string());
  opt.read_into("exp_avg", adamw_->exp_avg());
  opt.read_into("exp_avg_sq", adamw_->exp_avg_sq());
  step_ = s.step;
  micro_batches_ = s.micro_batches;
  // The micro-batch in use when the checkpoint was written (smaller than configured after an
  // out-of-memory fallback): the same cut of every step, so the same bits as without the kill.
  if (s.micro_batch <= clf_->options().max_batch)
    set_micro_batch(s.micro_batch);
  else
    spdlog::warn(
        "the checkpoint ran micro-batches of {} rows; this run plans {}: results will "
        "match only up to float summation order",
        s.micro_batch, micro_batch_);
  samples_ = s.samples;
  tokens_ = s.real_tokens;
  skipped_ = s.skipped_steps;
  if (s.loss_scale) scaler_.restore(*s.loss_scale, s.loss_scale_good_steps);
  nonfinite_in_row_ = s.nonfinite_in_row;
  // What the device keeps between reads (step_scalars.h), the logging window's loss sum included.
  StepScalarValues scalars{};
  if (s.window) {
    window_steps_ = s.window->steps;
    window_samples_ = s.window->samples;
    window_tokens_ = s.window->real_tokens;
    scalars[kWindowLoss] = s.window->loss_sum;
    window_restored_seconds_ = s.window->seconds;
  }
  stopped_by_ = s.stopped_by;
  scalars[kAdamSteps] = static_cast<double>(s.optimizer_steps);
  scalars[kSkippedSteps] = static_cast<double>(skipped_);
  scalars[kNonfiniteInRow] = static_cast<double>(nonfinite_in_row_);
  scalars[kStepsFinished] = static_cast<double>(step_);
  write_step_scalars(adamw_->step_scalars(), scalars);
  train_seconds_ = s.train_seconds;
  wait_seconds_ = s.input_wait_seconds;
  best_eval_ = s.best_eval;
  last_eval_ = s.last_eval;
  early_->restore(s.early_stopping, state_path + ": early_stopping");
  saved_step_ = step_;
  spdlog::info("resumed from {} at step {} (epoch {}, micro-batch {} x {})", ckpt.dir, step_,
               epoch_of(step_), micro_batch_, accumulation());
}

void Trainer::load_weights_from(const std::string& dir) {
  if (clf_->adapters_on()) {
    load_peft_adapter(*clf_, dir);  // the frozen base weights stay as loaded at setup
  } else {
    LoadOptions load;
    load.labels = data_.labels.names;
    load_model_weights(*clf_, dir, load);
  }
}

void Trainer::write_checkpoint(const std::string& dir, const StepScalarValues& scalars) {
  if (clf_->adapters_on())
    save_peft_adapter(*clf_, dir, cfg_.model.path);  // PEFT format: adapters + head
  else
    save_model(*clf_, dir);
  copy_tokenizer_files(cfg_.model.path, dir);
  io::write_safetensors((fs::path(dir) / "optimizer.safetensors").string(),
                        {{"exp_avg", adamw_->exp_avg(), std::nullopt},
                         {"exp_avg_sq", adamw_->exp_avg_sq(), std::nullopt}});
  nlohmann::json s;
  s["version"] = 2;
  s["step"] = step_;  // the data cursor: the next step trains on step batch `step`
  s["epoch"] = epoch_of(step_);
  s["micro_batch"] = micro_batch_;
  s["micro_tokens"] = micro_tokens_;
  s["micro_batches"] = micro_batches_;
  s["optimizer_steps"] = static_cast<int64_t>(scalars[kAdamSteps]);
  s["samples"] = samples_;
  s["real_tokens"] = tokens_;
  s["skipped_steps"] = skipped_;
  s["nonfinite_in_row"] = nonfinite_in_row_;
  s["loss_scale"] = scaler_.scale();
  s["loss_scale_good_steps"] = scaler_.good_steps();
  s["train_seconds"] = train_seconds_;
  s["input_wait_seconds"] = wait_seconds_;
  // The logging window so far (steps since the last train line), exact on resume.
  s["window"] = {{"steps", window_steps_},
                 {"samples", window_samples_},
                 {"real_tokens", window_tokens_},
                 {"loss_sum", scalars[kWindowLoss]},
                 {"seconds", seconds_since(window_start_)}};
  s["stopped_by"] = stopped_by_;
  s["best_eval"] = best_eval_;
  s["last_eval"] = last_eval_;
  s["early_stopping"] = early_->state();
  s["seed"] = tc_.seed;
  s["gradient_checkpointing"] = checkpointing_ == GradientCheckpointing::On;
  s["threads"] = compute_threads();
  s["fingerprints"] = fingerprints();
  io::write_json_atomic((fs::path(dir) / "trainer_state.json").string(), s);
}

void Trainer::save_checkpoint(bool best) {
  const auto t0 = Clock::now();
  // The step scalars first: a pending non-finite abort stops the run before anything is written.
  const StepScalarValues scalars = sync_step_scalars();
  const std::string dir =
      store_->save(step_, best, [&](const std::string& d) { write_checkpoint(d, scalars); });
  saved_step_ = step_;
  spdlog::info("checkpoint {}{} ({:.1f} s)", dir, best ? " (best so far)" : "", seconds_since(t0));
  static const int64_t exit_after = debug_env("FTUNE_DEBUG_EXIT_AFTER_CHECKPOINT");
  if (step_ == exit_after) {
    std::fflush(nullptr);
    _exit(137);
  }
}

void Trainer::set_micro_batch(int64_t rows) {
  FTUNE_ASSERT(rows >= 1 && rows <= clf_->options().max_batch,
               "micro-batch of {} rows; the arena is planned for 1 to {}", rows,
               clf_->options().max_batch);
  if (rows == micro_batch_) return;
  micro_batch_ = rows;
  spdlog::info("micro-batch {} rows from step {}: {} micro-batches for the effective batch {}",
               rows, step_ + 1, accumulation(), effective_);
}

void Trainer::train_step() {
  static const int64_t exit_at = debug_env("FTUNE_DEBUG_EXIT_AT_MICRO_STEP");
  // FTUNE_DEBUG_OOM_AT_STEP=s: an allocation "fails" inside optimizer step s (1-based), once, after
  // the first micro-batch's forward pass, as when another process takes the device's memory.
  static const int64_t oom_at = debug_env("FTUNE_DEBUG_OOM_AT_STEP");
  const auto t0 = Clock::now();
  if (step_batch_of_ != step_) {  // a retried step keeps its batch
    const auto tw = Clock::now();
    step_batch_ = prefetch_->next();
    wait_seconds_ += seconds_since(tw);
    // Padded by the run's rule (within the planned length), so micro-batches
    // come in few shapes (CUDA graphs, cuDNN plans); the padding is masked, so it changes results
    // only through the order of sums.
    pad_to_length(step_batch_,
                  pad_.length(step_batch_.seq_len, clf_->options().max_seq),
                  pad_id_);
    step_batch_of_ = step_;
  }
  const Batch& step_batch = step_batch_;
  validate_batch(model_, step_batch);  // every micro-batch is a cut of it
  step_positions_ = position_ids(model_, step_batch);
  const size_t rows_total = static_cast<size_t>(step_batch.size);
  const double step_weight =
      loss_weight(step_batch.labels, 0, rows_total, loss_options_.class_weights);
  const TensorView scalars = adamw_->step_scalars();
  clf_->zero_grad();
  step_scalars_begin(scalars);
  // The step's loss is the mean over all its rows: micro-batch k's mean loss weighs
  // W_k / W_step (its share of the loss's denominator), in the loss and in its backward; the
  // device accumulates it (step_scalars.h). Micro-batch k + 1's inputs are staged (host work and
  // an asynchronous copy) once k's kernels are queued, so they overlap k's compute.
  const bool inject_nonfinite = debug_nonfinite_step(step_ + 1);
  const float loss_scale = scaler_.scale();  // 1 unless fp16
  // What differs between micro-batches, staged with their inputs (read on the device, so a CUDA
  // graph replays any micro-batch of its shape: train/step_graphs.h).
  const auto micro_params = [&](int64_t row0, int64_t rows) {
    const double share = loss_weight(step_batch.labels, static_cast<size_t>(row0),
                                     static_cast<size_t>(row0 + rows),
                                     loss_options_.class_weights) /
                         step_weight;
    MicroParams m;
    m.row0 = static_cast<uint64_t>(row0);
    m.offset = static_cast<uint32_t>(step_);
    m.grad_scale = static_cast<float>(share) * loss_scale;
    m.loss_share = inject_nonfinite && row0 == 0 ? std::nan("") : share;
    return m;
  };
  int64_t micro_batches = micro_batches_;
  // Contiguous rows of the step batch: micro_batch_ rows each, or packed up to micro_tokens_.
  const std::vector<std::pair<int64_t, int64_t>> cuts =
      micro_batch_cuts(step_batch, layout(), micro_batch_, micro_tokens_);
  int slot = staging_->stage(step_batch, step_positions_, cuts[0].first, cuts[0].second,
                             micro_params(cuts[0].first, cuts[0].second));
  TrainingWork step_work;
  for (size_t cut = 0; cut < cuts.size(); ++cut) {
    if (micro_batches == exit_at) {
      std::fflush(nullptr);
      _exit(137);
    }
    const auto [row0, rows] = cuts[cut];
    const StagedInputs in = staging_->acquire(slot);
    clf_->use_inputs(in.inputs, in.labels);
    step_work.add(flop_model(model_), step_batch, row0, rows, in.inputs.T, in.inputs.packed());
    const DropoutPlan dropout{true, tc_.seed, static_cast<uint32_t>(step_),
                              static_cast<uint64_t>(row0), stream_seq_, in.micro};
    clf_->prepare_forward(loss_options_);  // nothing lazy left inside the region
    const bool inject_oom = step_ + 1 == oom_at && oom_retries_.empty();
    const auto region = [&] {
      clf_->forward(dropout);
      if (inject_oom) throw OutOfMemoryError("FTUNE_DEBUG_OOM_AT_STEP: injected allocation failure");
      const TensorView micro_loss = clf_->loss(loss_options_);
      step_scalars_add_loss(scalars, micro_loss, 0.0, &in.micro->loss_share);
      clf_->backward(dropout, 1.0f, &in.micro->grad_scale);
    };
    // A replayed graph runs none of the region's host code: the injected failure runs eagerly.
    // Packed batches run eagerly (their per-row loops read cu_seqlens on the host).
    if (graphs_ && !inject_oom && !in.inputs.packed())
      graphs_->run(MicroGraphKey{rows, in.inputs.T}, region);
    else
      region();
    if (cut + 1 < cuts.size()) {
      const auto [next0, next] = cuts[cut + 1];
      slot = staging_->stage(step_batch, step_positions_, next0, next, micro_params(next0, next));
    }
    ++micro_batches;
  }
  micro_batches_ = micro_batches;
  work_ += step_work;
  const int64_t step_samples = step_batch.size, step_tokens = step_batch.real_tokens();
  // Norm, clip factor and the finite check on the device; AdamW applies the step or, when the
  // loss or the norm is not finite, touches nothing (the counters move on the device). fp16: the
  // gradients are S times too large; the device unscales the norm and the clip coefficient.
  // Mixed precision: AdamW writes the 16-bit weight shadow in its pass where it can (full
  // fine-tuning); otherwise the model recasts it before the next forward. The scheduled learning
  // rate goes to the device first (one small kernel), so the tail's launches take the same
  // arguments every step and, with CUDA graphs, replay as one graph (not in fp16, whose loss
  // scale changes the arguments).
  const double lr = schedule_.lr(step_);
  const SequenceClassifier::OptimizerShadow shadow = clf_->optimizer_shadow();
  adamw_->set_learning_rate(static_cast<float>(lr));
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
  if (scaler_.enabled()) follow_loss_scale();
  ++step_;
  if (step_ == 1 && !plan_.target.device.is_cpu()) {
    spdlog::info("gemm autotune after the first step: {}", gemm_autotune_report());
    gemm_autotune_save();  // the shapes timed so far, for every later process
  }
  samples_ += step_samples;
  tokens_ += step_tokens;
  ++window_steps_;
  window_samples_ += step_samples;
  window_tokens_ += step_tokens;
  if (step_ % tc_.log_every == 0 || step_ == total_steps_) {
    // The one read of the step scalars in a logging interval.
    const StepScalarValues v = sync_step_scalars();
    sample_device_memory();
    const double secs = std::max(seconds_since(window_start_), 1e-9);
    shown_loss_ = v[kWindowLoss] / window_steps_;
    log_->write({{"split", "train"},
                 {"step", step_},
                 {"epoch", epoch_of(step_ - 1)},
                 {"loss", shown_loss_},
                 {"lr", lr},
                 {"grad_norm", v[kGradNorm]},
                 {"samples_per_s", window_samples_ / secs},
                 {"tokens_per_s", window_tokens_ / secs}});
    step_scalars_set(scalars, kWindowLoss, 0.0);
    window_steps_ = window_samples_ = window_tokens_ = 0;
    window_start_ = Clock::now();
  }
  train_seconds_ += seconds_since(t0);
  progress_->update(TrainProgress{
      step_, epoch_of(step_ - 1) + 1, shown_loss_, samples_ - samples_at_start_,
      tokens_ - tokens_at_start_,
      work_.padded_tokens > 0
          ? double(work_.padded_tokens - work_.real_tokens) / double(work_.padded_tokens)
          : 0.0});
}

StepScalarValues Trainer::sync_step_scalars() {
  const StepScalarValues v = read_step_scalars(adamw_->step_scalars());
  const int64_t skipped = static_cast<int64_t>(v[kSkippedSteps]);
  if (skipped > skipped_)
    spdlog::warn(
        "{} step(s) with non-finite loss or gradients up to step {} (last step: loss {} / gradient "
        "norm {}); update skipped, weights and moments untouched",
        skipped - skipped_, step_, v[kLastStepLoss], v[kGradNorm]);
  skipped_ = skipped;
  nonfinite_in_row_ = static_cast<int64_t>(v[kNonfiniteInRow]);
  if (v[kAbortStep] != 0.0)
    throw Error(fmt::format(
        "{} consecutive steps with non-finite loss or gradients (training.max_nonfinite_steps); "
        "stopping at step {}. Lower training.learning_rate or check the data",
        tc_.max_nonfinite_steps, static_cast<int64_t>(v[kAbortStep])));
  return v;
}

void Trainer::write_op_profile(const profile::StepProfile& p) const {
  spdlog::info("{}", p.table());
  io::write_json_atomic((run_ / "op_profile.json").string(), p.to_json());
}

// fp16 only: the host keeps the loss scale, so it reads the step's outcome after every step (one
// small read per step; bf16 and fp32 steps make none). An overflow at the current scale halves it
// and is logged here; a real divergence (non-finite loss, or gradients once the scale is
// exhausted) is left to sync_step_scalars' warning and abort.
void Trainer::follow_loss_scale() {
  const StepScalarValues v = read_step_scalars(adamw_->step_scalars());
  const float scale = scaler_.scale();
  if (v[kScaleOverflow] != 0.0) {
    scaler_.update(std::numeric_limits<double>::infinity());
    skipped_ = static_cast<int64_t>(v[kSkippedSteps]);
    spdlog::info("step {}: fp16 gradients overflow at loss scale {}; step skipped, scale now {}",
                 step_ + 1, scale, scaler_.scale());
  } else if (v[kStepOk] != 0.0) {
    scaler_.update(v[kGradNorm] * scale);
  }
}

nlohmann::json Trainer::run_eval(const TokenizedSplit& split, const char* name) {
  const auto t0 = Clock::now();
  const bool is_test = std::string(name) == "test";
  const ClassificationMetrics m =
      evaluate(*clf_, split.examples, eval_batch_, pad_id_, loss_options_,
               is_test ? EvalSplit::Test : EvalSplit::Validation, progress_.get(), name);
  nlohmann::json j;
  if (model_.num_labels() == 2) {
    // The decision threshold is chosen on validation data only; the test split gets the one of
    // the selected (best) validation evaluation.
    if (!is_test) {
      j = m.to_json(m.best_threshold(
          parse_threshold_metric(cfg_.eval.threshold_metric, "eval.threshold_metric")));
    } else if (best_eval_.contains("at_threshold")) {
      const auto& t = best_eval_["at_threshold"];
      j = m.to_json(BinaryThreshold{t.at("margin").get<double>(), t.at("threshold").get<double>(),
                                    t.at("chosen_by").get<std::string>(),
                                    t.at("validation_value").get<double>()});
    }
  }
  if (j.is_null()) j = m.to_json();
  j["step"] = step_;
  j["epoch"] = epoch_of(std::max<int64_t>(step_ - 1, 0));
  j["seconds"] = seconds_since(t0);
  std::string extra;
  if (j.contains("roc_auc") && !j["roc_auc"].is_null())
    extra += fmt::format(" roc-auc {:.4f}", j["roc_auc"].get<double>());
  if (j.contains("at_threshold"))
    extra += fmt::format(" | threshold {:.3f}: f1 {:.4f} accuracy {:.4f}",
                         j["at_threshold"]["threshold"].get<double>(),
                         j["at_threshold"]["f1"].get<double>(),
                         j["at_threshold"]["accuracy"].get<double>());
  spdlog::info("{} step {}: loss {:.4f} accuracy {:.4f} macro-F1 {:.4f}{} ({:.1f} s)", name, step_,
               j["loss"].get<double>(), j["accuracy"].get<double>(), j["macro_f1"].get<double>(),
               extra, j["seconds"].get<double>());
  nlohmann::json line = j;
  line["split"] = name;
  log_->write(line);
  window_start_ = Clock::now();  // evaluation time is not training throughput
  return j;
}

nlohmann::json Trainer::summary(const std::string& status) const {
  nlohmann::json s;
  s["status"] = status;
  s["model"] = model_.info().architecture;
  s["source"] = cfg_.model.path;
  s["labels"] = data_.labels.names;
  s["initialised"] = load_report_.initialised;
  s["device"] = device_name(plan_.target.device);
  s["precision"] = std::string(precision_name(plan_.precision.precision));
  s["tf32"] = tf32_.on;
  s["attention"] = attention_kernel_name(plan_.attention.kernel);
  s["attention_memory"] = attention_memory_note(
      uses_cudnn_attention(plan_.target.attention, plan_.target.device, plan_.target.precision));
  s["pad_to_multiple_of"] = pad_.multiple;
  s["padding"] = pad_.describe();
  {
    nlohmann::json g{{"on", cuda_graphs_.on}, {"why", cuda_graphs_.why}};
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
  }
  if (!plan_.target.device.is_cpu()) s["gemm_autotune"] = gemm_autotune_report();
  s["gpu_paths"] = gpu_paths_json(gpu_path_counts() - gpu_paths_at_start_);
  s["peft"] = peft_method_name(cfg_.peft.method);
  s["trainable_parameters"] = clf_->trainable_params().total();
  s["gradient_checkpointing"] = checkpointing_ == GradientCheckpointing::On;
  s["threads"] = compute_threads();
  s["steps"] = step_;
  s["total_steps"] = total_steps_;
  s["epochs"] = static_cast<double>(step_) / steps_per_epoch_;
  s["micro_batch"] = micro_batch_;  // in use at the end (smaller after an out-of-memory fallback)
  s["packing"] = {{"on", micro_tokens_ > 0}, {"why", plan_.packing.why}};
  if (micro_tokens_ > 0) s["micro_batch_tokens"] = micro_tokens_;
  s["gradient_accumulation"] = accumulation();
  s["effective_batch"] = effective_;
  s["skipped_steps"] = skipped_;
  // Host reads of device scalars during this run: the step scalars (once per logging interval,
  // evaluation and checkpoint) and single-value reads (evaluation's per-batch loss).
  s["host_reads"] = {{"step_scalars", step_scalar_reads() - step_scalar_reads_at_start_},
                     {"scalars", host_scalar_reads() - host_scalar_reads_at_start_}};
  s["train_samples"] = samples_;
  s["train_real_tokens"] = tokens_;
  s["train_samples_per_s"] = train_seconds_ > 0 ? samples_ / train_seconds_ : 0.0;
  s["train_tokens_per_s"] = train_seconds_ > 0 ? tokens_ / train_seconds_ : 0.0;
  s["train_seconds"] = train_seconds_;
  s["input_wait_seconds"] = wait_seconds_;
  s["input_wait_fraction"] = train_seconds_ > 0 ? wait_seconds_ / train_seconds_ : 0.0;
  s["wall_seconds"] = seconds_since(t_start_);
  // FLOPs and MFU (train/flops.h); the precision is the run's GEMM math.
  // (null when this process trained nothing: a resumed run that only had to finish)
  const nlohmann::json flops =
      flops_summary(work_, s["train_samples_per_s"].get<double>(), plan_.target.device,
                    plan_.precision.precision, tf32_gemms_on());
  if (flops.is_object()) s.update(flops);
  s["arena_bytes"] = arena_->capacity();
  nlohmann::json memory = memory_report(*arena_, plan_.target.device);
  memory["device"] = device_name(plan_.target.device);
  memory["available_bytes"] = plan_.memory.available;
  memory["budget_bytes"] = plan_.choice.budget;
  memory["max_seq"] = plan_.target.max_seq;
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
    memory["measured_device_bytes"] = free_before_run_ - std::min(free_before_run_, min_free_);
    memory["measured_over_planned"] =
        static_cast<double>(free_before_run_ - std::min(free_before_run_, min_free_)) /
        static_cast<double>(planned);
  }
  s["memory"] = memory;
  s["peak_host_bytes"] = device_bytes_peak(DeviceKind::CPU);
  if (!plan_.target.device.is_cpu())
    s["peak_device_bytes"] = device_bytes_peak(plan_.target.device.kind);
  s["peak_rss_bytes"] = peak_rss_bytes();
  if (gpu_sampler_) s["gpu"] = gpu_sampler_->json();
  s["eval_metric"] = eval_metric_;
  s["final_eval"] = last_eval_;
  s["best_eval"] = best_eval_;
  s["data"] = data_.report;
  if (store_) {
    if (auto b = store_->best()) s["best_checkpoint"] = b->dir;
    if (auto l = store_->last()) s["last_checkpoint"] = l->dir;
  }
  return s;
}

nlohmann::json Trainer::run() {
  set_compute_threads(static_cast<int>(tc_.threads));
  lock_.emplace(io::DirLock::acquire(run_.string(), "output.dir"));
  check_run_dir();
  load_data_and_model();
  prepare_run_dir();
  plan_schedule();
  store_ = std::make_unique<CheckpointStore>(run_.string(), cfg_.checkpoint.keep_last);
  std::optional<int64_t> resume_step;
  if (options_.resume) {
    const auto last = store_->last();
    if (!last) throw InputError(fmt::format("{}: no checkpoint to resume from", store_->root()));
    restore(*last);
    resume_step = step_;
  }
  log_ = std::make_unique<RunLog>(run_.string(), resume_step, cfg_.output.tensorboard);
  spdlog::info(
      "training {} ({} labels) for {} steps ({} epochs of {} steps): micro-batch {} x {} "
      "accumulation = {}, lr {:g}{}, {} threads",
      model_.info().architecture, data_.labels.names.size(), total_steps_,
      static_cast<double>(total_steps_) / steps_per_epoch_, steps_per_epoch_, micro_batch_,
      accumulation(), effective_, tc_.learning_rate,
      tc_.layer_decay < 1 ? fmt::format(" (layer decay {:g})", tc_.layer_decay) : "",
      compute_threads());

  if (cfg_.output.progress == "auto") {
    progress_ = ProgressBar::for_stderr(tc_.log_every);
  } else {
    ProgressOptions po;
    po.terminal = cfg_.output.progress == "bar";
    po.log_every = tc_.log_every;
    const auto t0 = Clock::now();
    progress_ = std::make_unique<ProgressBar>(std::cerr, spdlog::default_logger(), po,
                                              [t0] { return seconds_since(t0); });
  }
  gpu_sampler_ = cuda::device_sampler(plan_.target.device);  // nullptr on the CPU
  if (gpu_sampler_) {
    if (!gpu_sampler_->available()) spdlog::info("GPU sampling off: {}", gpu_sampler_->reason());
    gpu_sampler_->start();
    progress_->set_status([s = gpu_sampler_.get()] { return s->status_text(); });
  }
  progress_->begin_training(total_steps_, (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_);
  prefetch_ = std::make_unique<data::BatchPrefetcher>(
      data::BatchPrefetcher::training_batches(*batcher_, &data_.train.examples, pad_id_), step_,
      total_steps_, tc_.prefetch);
  samples_at_start_ = samples_;
  tokens_at_start_ = tokens_;
  static const int64_t sigterm_at = debug_env("FTUNE_DEBUG_SIGTERM_AT_STEP");
  static const std::pair<int64_t, int64_t> micro_change = debug_micro_batch_change();
  StopSignal stop;
  if (stopped_by_ != "completed")
    spdlog::info("the run had stopped at step {} ({}); finishing it", step_, stopped_by_);
  // A restored window's rates count its time before the resume too.
  window_start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(window_restored_seconds_));
  while (step_ < total_steps_ && stopped_by_ == "completed") {
    if (step_ == micro_change.first) set_micro_batch(micro_change.second);
    try {
      profile::StepRecorder op_profile(step_ + 1, total_steps_, plan_.target.device);
      train_step();
      if (op_profile.active()) write_op_profile(op_profile.finish());
    } catch (const OutOfMemoryError& e) {
      shrink_micro_batch(e);
      continue;  // the same step again, on the same batch
    }
    if (step_ == sigterm_at) std::raise(SIGTERM);
    const bool epoch_ended = step_ % steps_per_epoch_ == 0;
    const bool last = step_ == total_steps_;
    const bool eval_now =
        data_.validation && ((cfg_.eval.every_steps > 0 && step_ % cfg_.eval.every_steps == 0) ||
                             (cfg_.eval.each_epoch && epoch_ended) || last);
    bool is_best = false, stop_now = false;
    if (eval_now) {
      sync_step_scalars();  // a pending non-finite abort stops the run before it evaluates
      last_eval_ = run_eval(*data_.validation, "validation");
      const double value = last_eval_.value(eval_metric_, std::nan(""));
      is_best = early_->update(value, last_eval_.value("loss", std::nan("")), step_);
      if (is_best) best_eval_ = last_eval_;
      if (early_->should_stop()) {
        spdlog::info(
            "early stopping: {} has not improved for {} evaluations (best {:.4f} at step {})",
            eval_metric_, early_->evals_without_improvement(), *early_->best(),
            early_->best_step());
        stopped_by_ = "early_stopping";
        stop_now = true;
      }
      if (options_.on_eval && options_.on_eval(step_, last_eval_)) {
        stopped_by_ = "hook";
        stop_now = true;
      }
    }
    const bool periodic =
        cfg_.checkpoint.every_steps > 0 ? step_ % cfg_.checkpoint.every_steps == 0 : eval_now;
    if (periodic || last || stop_now || (is_best && cfg_.checkpoint.save_best))
      save_checkpoint(is_best && cfg_.checkpoint.save_best);
    if (stop.requested() || (options_.stop_requested && options_.stop_requested())) {
      if (saved_step_ != step_) save_checkpoint(false);
      io::write_json_atomic((run_ / "summary.json").string(), summary("interrupted"));
      throw Interrupted(fmt::format("stopped by {} at step {}; checkpoint saved, continue "
                                    "with `ftune train --config ... --resume`",
                                    stop.requested() ? fmt::format("signal {}", stop.signal())
                                                     : std::string("request"),
                                    step_),
                        stop.signal());
    }
    if (stop_now) break;
  }
  if (saved_step_ != step_) save_checkpoint(false);

  // The selected model: best on validation (reloaded for the test split), else the last.
  const auto best = store_->best();
  const auto chosen = best ? *best : *store_->last();
  if (chosen.step != step_) load_weights_from(chosen.dir);
  progress_->finish();
  nlohmann::json test_metrics;
  if (data_.test) test_metrics = run_eval(*data_.test, "test");
  const std::string model_dir = (run_ / "model").string();
  if (clf_->adapters_on()) {
    // adapter/: the PEFT adapter (with the base model it needs); model/: adapters merged into the
    // base weights, a plain HF model for predict, eval and transformers.
    publish_model(chosen.dir, (run_ / "adapter").string());
    merge_adapters(*clf_);
    publish_dir(model_dir, [&](const std::string& tmp) {
      save_model(*clf_, tmp);
      copy_tokenizer_files(cfg_.model.path, tmp);
    });
  } else {
    publish_model(chosen.dir, model_dir);
  }

  if (best_eval_.contains("at_threshold")) {
    // The binary decision threshold chosen on validation travels with the model: predict and
    // eval apply it unless told otherwise.
    const auto& t = best_eval_["at_threshold"];
    io::write_json_atomic((fs::path(model_dir) / "decision_threshold.json").string(),
                          {{"threshold", t["threshold"]},
                           {"margin", t["margin"]},
                           {"chosen_by", t["chosen_by"]},
                           {"validation_value", t["validation_value"]},
                           {"positive_label", data_.labels.names[1]},  // id 1: P(1) > threshold
                           {"step", best_eval_["step"]}});
  }
  if (gpu_sampler_) gpu_sampler_->stop();  // the summary's GPU figures cover the whole run
  if (!plan_.target.device.is_cpu()) gemm_autotune_save();
  nlohmann::json s = summary(stopped_by_);
  s["test"] = test_metrics;
  s["model_dir"] = model_dir;
  s["model_step"] = chosen.step;
  io::write_json_atomic((run_ / "summary.json").string(), s);
  spdlog::info("done in {:.1f} s ({}): model of step {} saved to {}", seconds_since(t_start_),
               stopped_by_, chosen.step, model_dir);
  return s;
}

}  // namespace

nlohmann::json run_training(const TrainConfig& config, const TrainOptions& options) {
  Trainer trainer(config, options);
  return trainer.run();
}

}  // namespace ftune
