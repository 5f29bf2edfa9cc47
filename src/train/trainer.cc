// The training run (see trainer.h): the run loop. The Trainer orders a run: setup (tokenizer,
// data, model spec, memory plan, schedule, resume), then steps until the last, with evaluation,
// early stopping, checkpoints, signals and logging at step boundaries, and at the end the selected
// model published and the summary written. How a step is computed (micro-batches, accumulation,
// the out-of-memory fallback, CUDA graphs, input staging) is the step strategy's
// (train/step_strategy.h; train/single_device_step.h on one device), over state planned into one
// arena before the first step.
//
// Determinism: optimizer step s trains on batch s % S of epoch s / S of the length-bucketed
// batcher, which cuts the effective batch (batch_size x gradient_accumulation rows; S =
// ceil(N / effective) steps per epoch, the last one of an epoch may be smaller); the strategy
// computes it independently of how it cuts it into micro-batches. The step s is the data cursor:
// a checkpoint records s, the micro-batch size in use, the optimizer moments and the
// early-stopping state (trainer_checkpoint.cc), so a resumed run replays exactly the same
// arithmetic as an uninterrupted one (same thread count).
//
// The host reads the device's step scalars (loss, gradient norm, skip counters: step_scalars.h)
// once per logging interval (training.log_every) and at evaluation, checkpoint, interrupt and end
// of run. A run of training.max_nonfinite_steps non-finite steps in a row is therefore reported at
// the next read, up to log_every steps late; from the step that reached the limit on, the device
// applies nothing, so the weights and moments are those from before that run.
#include "train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "core/op_profile.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "models/adapters.h"
#include "models/peft_adapter.h"
#include "ops/backend_context.h"
#include "train/evaluate.h"
#include "train/run_dir.h"
#include "train/single_device_step.h"
#include "train/stop_signal.h"
#include "train/trainer_run.h"
#include "train/trainer_state.h"

namespace ftune {

namespace fs = std::filesystem;

void Trainer::load_data_and_model() {
  tok_.emplace(load_run_tokenizer(cfg_));
  LoadOptions load;
  load.reinit_mismatched_head = true;
  load.init_seed = tc_.seed;
  load.warn_initialised = !options_.resume;  // the checkpoint restored next replaces the head
  if (cfg_.peft.enabled()) {
    // PEFT's reading of target_modules on this model, before the data is read: a target ftune
    // cannot adapt fails here; the modules adapted are logged.
    LoadOptions as;
    as.causal_lm = cfg_.model.task == ModelTask::CausalLm;
    const ModelSpec base = load_model_spec(cfg_.model.path, as);
    const std::vector<std::string> adapted =
        resolve_target_modules(cfg_.peft, base.backbone().modules(), "peft");
    spdlog::info("peft: adapters on {} modules, {} to {}", adapted.size(), adapted.front(),
                 adapted.back());
  }
  // Labels come from the data unless the config names them; the head is sized to match.
  const int64_t max_length = usable_max_length(cfg_);
  data_ = load_train_data(cfg_, *tok_, max_length);
  stream_seq_ = max_length;  // every sequence is truncated to it, so it bounds every T
  const bool lm = data_.task.causal_lm;
  if (lm) {
    load.causal_lm = true;  // the checkpoint's lm_head; a family without one is refused, named
    load.reinit_mismatched_head = false;
    spdlog::info("task: causal LM, the loss on the completion tokens (prompt masked)");
  } else {
    load.labels = data_.labels.names;
  }
  if (!lm) {
    // A checkpoint's head is kept as shipped; a task of another label count gets a new one.
    const ModelSpec shipped = load_model_spec(cfg_.model.path);
    const auto& task = data_.task;
    const bool same_size = shipped.num_labels() == static_cast<int64_t>(data_.labels.names.size());
    // listwise ranks one score per row: a one-score head, or a 2-label head's logit 1 - logit 0.
    if (task.objective == LossSetting::Listwise && !task.scores() && data_.labels.names.size() > 2)
      throw InputError(fmt::format(
          "key 'training.loss': listwise ranks one score per row, but {} has {} class labels "
          "({}); use 0/1 relevance (or a checkpoint with num_labels 1, whose head listwise "
          "trains as it is), or training.loss cross_entropy for a {}-class classifier",
          cfg_.data.train, data_.labels.names.size(), data_.labels.describe(),
          data_.labels.names.size()));
    if (task.scores())
      spdlog::info(
          "task: {}, training.loss {}{}",
          task.multi_label ? fmt::format("{} labels, any number per row", data_.labels.names.size())
                           : std::string("one score per row"),
          task.loss_name, same_size ? fmt::format(", the head of {} kept", cfg_.model.path) : "");
    if (!same_size)
      spdlog::info(
          "{}: its config has {} label{}; this task has {} ({}): the output layer is made anew{}",
          cfg_.model.path, shipped.num_labels(), shipped.num_labels() == 1 ? "" : "s",
          data_.labels.names.size(),
          task.multi_label ? "multi-label"
          : task.scores()  ? "one score"
                           : "class labels",
          shipped.num_labels() == 1 && !task.scores()
              ? " (a one-score checkpoint trains with bce, mse, listwise or margin_mse: "
                "training.loss auto keeps its head)"
              : "");
  }
  model_ = load_model_spec(cfg_.model.path, load)
               .with_dropout({static_cast<float>(tc_.hidden_dropout),
                              static_cast<float>(tc_.attention_dropout),
                              static_cast<float>(tc_.classifier_dropout)});
  if (data_.task.set_problem_type) model_ = model_.with_problem_type(data_.task.problem_type);
  loss_options_.kind = data_.task.loss;
  loss_options_.label_smoothing = static_cast<float>(tc_.label_smoothing);
  loss_options_.class_weights = resolve_class_weights(tc_, data_.labels.names);
  if (data_.task.grouped()) {  // listwise or margin_mse: groups of data.group_size rows
    loss_options_.listwise_group_size = cfg_.data.group_size;
    loss_options_.margin_mse = data_.task.objective == LossSetting::MarginMse;
  }
  pad_id_ = static_cast<int32_t>(model_.info().pad_token_id);

  plan_batch();
  if (group_->launched())
    reducer_ =
        std::make_unique<GradientReducer>(*group_, plan_.target.device, tc_.reduce_bucket_mb);
  strategy_ = std::make_unique<SingleDeviceStep>(cfg_, model_, plan_, stream_seq_, loss_options_,
                                                 hooks_, reducer_.get());
  load_report_ = load_model_weights(clf(), cfg_.model.path, load);
  if (clf().adapters_on()) {
    clf().init_adapters(tc_.seed);  // PEFT's initialisation; a resume loads the saved adapter
    spdlog::info("{}: {} trainable parameters ({:.2f}% of {}), gradient checkpointing {}",
                 peft_method_name(cfg_.peft.method), clf().trainable_params().total(),
                 100.0 * clf().trainable_params().total() / clf().params().total(),
                 clf().params().total(), gradient_checkpointing_name(strategy_->checkpointing()));
  }
}

void Trainer::plan_batch() {
  BatchPlanOptions options;
  options.device = training_device(cfg_);  // the arena, and so every op, lives there
  // Data-parallel ranks on GPUs: `cuda` is the local rank's GPU (cuda:N stays as given).
  if (group_->launched() && !options.device.is_cpu() && tc_.device == "cuda")
    options.device = Device::cuda(group_->local_rank());
  options.ranks = group_->size();
  options.local_ranks = group_->local_size();
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
  spdlog::info("micro-batches {} ({})", plan_.packing.on ? "packed" : "padded", plan_.packing.why);
  spdlog::info("precision {} ({})", precision_name(plan_.precision.precision),
               plan_.precision.reason);
  if (!plan_.target.device.is_cpu())
    spdlog::info("attention kernel {} ({})", attention_kernel_name(plan_.attention.kernel),
                 plan_.attention.reason);
  spdlog::info("memory plan: {} ({} available on {} per {}; budget {} = {})", c.reason,
               format_bytes(plan_.memory.available), device_name(plan_.target.device),
               plan_.memory.source, format_bytes(c.budget), plan_.budget_source);
  if (c.over_budget)
    spdlog::warn(
        "micro-batch {} needs {} but the memory budget is {} (the largest that fits is {}); "
        "trying anyway: if the allocation fails the micro-batch halves",
        c.micro_batch, format_bytes(c.planned_bytes), format_bytes(c.budget),
        std::max(c.fits_without_checkpointing, c.fits_with_checkpointing));
}

void Trainer::plan_schedule() {
  effective_ = cfg_.effective_batch();
  batcher_ =
      std::make_unique<data::LengthBucketedBatcher>(&data_.train.examples, effective_, tc_.seed);
  steps_per_epoch_ = batcher_->batches_per_epoch();
  if (loss_options_.listwise_group_size > 0) {
    // Listwise: the effective batch counts groups of data.group_size rows (group_sampler.h);
    // data-parallel ranks each compute whole groups of every step (gradient_reducer.h).
    const int64_t gs = loss_options_.listwise_group_size;
    sampler_ = std::make_unique<GroupSampler>(&data_.train.examples, gs, effective_, tc_.seed);
    spdlog::info(
        "{}: {} query groups of {} rows (1 positive + {} negatives drawn each epoch), {} "
        "groups a step ({} rows); skipped: {} without a positive, {} without a negative; {} with "
        "fewer than {} negatives repeat theirs",
        data_.task.loss_name, sampler_->groups(), gs, gs - 1, effective_, effective_ * gs,
        sampler_->skipped_without_positive(), sampler_->skipped_without_negative(),
        sampler_->padded_groups(), gs - 1);
    effective_ *= gs;
    steps_per_epoch_ = sampler_->batches_per_epoch();
  }
  total_steps_ = tc_.max_steps > 0 ? tc_.max_steps : tc_.epochs * steps_per_epoch_;
  const int64_t warmup = tc_.warmup_steps > 0
                             ? tc_.warmup_steps
                             : static_cast<int64_t>(std::ceil(tc_.warmup_ratio * total_steps_));
  schedule_ = LrSchedule{tc_.schedule, tc_.learning_rate, warmup, total_steps_};
  // Query groups in the validation data: ranking metrics (train/ranking_metrics.h), ndcg@10 by
  // default.
  const bool grouped =
      data_.validation && std::any_of(data_.validation->examples.begin(),
                                      data_.validation->examples.end(),
                                      [](const data::TokenizedExample& e) { return e.group >= 0; });
  eval_metric_ = data_.task.causal_lm ? (cfg_.eval.metric == "auto" ? "loss" : cfg_.eval.metric)
                 : cfg_.eval.metric == "auto" && grouped
                     ? "ndcg@10"
                     : resolve_eval_metric(cfg_.eval.metric, data_.task, model_.num_labels());
  if (parse_ranking_metric(eval_metric_, "eval.metric") && !grouped && data_.validation)
    throw InputError(fmt::format(
        "key 'eval.metric': {} is a ranking metric, but the validation rows have no query groups "
        "(set data.group_field, or use FlagEmbedding's nested format)",
        eval_metric_));
  if (grouped && model_.num_labels() > 2)
    throw InputError(fmt::format(
        "the validation rows have query groups, but the model has {} labels: ranking needs one "
        "score per row (1 or 2 labels)",
        model_.num_labels()));
  const bool maximize = cfg_.eval.mode == MetricMode::Auto ? metric_maximized(eval_metric_)
                                                           : cfg_.eval.mode == MetricMode::Max;
  early_ = std::make_unique<EarlyStopping>(eval_metric_, maximize, cfg_.early_stopping.patience,
                                           cfg_.early_stopping.min_delta);
}

// The GPU sampler's view of the log interval that just ended: mean utilisation over the samples
// taken in it, and the device memory in use at the latest one (all processes, as nvidia-smi).
void Trainer::add_gpu_interval(nlohmann::json& line) {
  if (!outputs_.gpu_sampler || !outputs_.gpu_sampler->available()) return;
  const cuda::NvmlStats s = outputs_.gpu_sampler->stats();
  const double sum = s.gpu_util_mean * double(s.gpu_util_samples);
  if (s.gpu_util_samples > window_.util_samples)
    line["gpu_util_percent"] =
        (sum - window_.util_sum) / double(s.gpu_util_samples - window_.util_samples);
  window_.util_sum = sum;
  window_.util_samples = s.gpu_util_samples;
  if (const auto latest = outputs_.gpu_sampler->latest(); latest && latest->memory_used)
    line["gpu_memory_used_bytes"] = *latest->memory_used;
}

void Trainer::train_step() {
  const auto t0 = RunClock::now();
  if (step_batch_of_ != state_.step) {  // a retried step keeps its batch
    const auto tw = RunClock::now();
    step_batch_ = prefetch_->next();
    const double waited = seconds_since(tw);
    state_.wait_seconds += waited;
    window_.wait_seconds += waited;
    strategy_->prepare_batch(step_batch_);
    step_batch_of_ = state_.step;
  }
  const double lr = schedule_.lr(state_.step);
  const StepOutcome outcome =
      strategy_->step(step_batch_, StepRequest{state_.step, lr, state_.micro_batches});
  state_.micro_batches += outcome.micro_batches;
  if (outcome.skipped_steps) state_.skipped = *outcome.skipped_steps;
  ++state_.step;
  const int64_t step_samples = step_batch_.size, step_tokens = step_batch_.real_tokens();
  state_.samples += step_samples;
  state_.tokens += step_tokens;
  ++window_.steps;
  window_.samples += step_samples;
  window_.tokens += step_tokens;
  if (state_.step % tc_.log_every == 0 || state_.step == total_steps_) {
    // The one read of the step scalars in a logging interval.
    const StepScalarValues v = sync_step_scalars();
    strategy_->sample_device_memory();
    const double secs = std::max(seconds_since(window_.start), 1e-9);
    window_.shown_loss = v[kWindowLoss] / window_.steps;
    nlohmann::json line{{"split", "train"},
                        {"step", state_.step},
                        {"epoch", epoch_of(state_.step - 1)},
                        {"loss", window_.shown_loss},
                        {"lr", lr},
                        {"grad_norm", v[kGradNorm]},
                        {"samples_per_s", window_.samples / secs},
                        {"tokens_per_s", window_.tokens / secs},
                        {"input_wait_fraction", std::min(1.0, window_.wait_seconds / secs)}};
    add_gpu_interval(line);
    log_line(line);
    step_scalars_set(strategy_->optimizer().step_scalars(), kWindowLoss, 0.0);
    window_.steps = window_.samples = window_.tokens = 0;
    window_.wait_seconds = 0;
    window_.start = RunClock::now();
  }
  state_.train_seconds += seconds_since(t0);
  const TrainingWork& work = strategy_->work();
  outputs_.progress->update(
      TrainProgress{state_.step, epoch_of(state_.step - 1) + 1, window_.shown_loss,
                    state_.samples - samples_at_start_, state_.tokens - tokens_at_start_,
                    work.padded_tokens > 0
                        ? double(work.padded_tokens - work.real_tokens) / double(work.padded_tokens)
                        : 0.0});
}

void Trainer::publish_selected(const CheckpointEntry& chosen, const std::string& model_dir) {
  if (clf().adapters_on()) {
    // adapter/: the PEFT adapter (with the base model it needs); model/: adapters merged into the
    // base weights, a plain HF model for predict, eval and transformers (a frozen base stored in
    // 16 bits merged from the base checkpoint's own precision: save_merged_model).
    publish_model(chosen.dir, (run_ / "adapter").string());
    publish_dir(model_dir, [&](const std::string& tmp) {
      save_merged_model(clf(), cfg_.model.path, tmp);
      copy_tokenizer_files(cfg_.model.path, tmp);
      if (data_.pair_template) text::save_pair_template(tmp, *data_.pair_template);
    });
  } else {
    publish_model(chosen.dir, model_dir);
  }
  if (data_.task.multi_label && state_.best_eval.contains("at_threshold")) {
    // Multi-label: one threshold per label, chosen on validation (each maximising its F1).
    const auto& t = state_.best_eval["at_threshold"];
    io::write_json_atomic((fs::path(model_dir) / "decision_threshold.json").string(),
                          {{"thresholds", t["thresholds"]},
                           {"margins", t["margins"]},
                           {"labels", data_.labels.names},
                           {"chosen_by", "f1 per label"},
                           {"step", state_.best_eval["step"]}});
  } else if (state_.best_eval.contains("at_threshold")) {
    // The binary decision threshold chosen on validation travels with the model: predict and
    // eval apply it unless told otherwise.
    const auto& t = state_.best_eval["at_threshold"];
    io::write_json_atomic((fs::path(model_dir) / "decision_threshold.json").string(),
                          {{"threshold", t["threshold"]},
                           {"margin", t["margin"]},
                           {"chosen_by", t["chosen_by"]},
                           {"validation_value", t["validation_value"]},
                           // id 1: P(1) > threshold; a one-score model: sigmoid(score)
                           {"positive_label", data_.labels.names.back()},
                           {"step", state_.best_eval["step"]}});
  }
}

nlohmann::json Trainer::run() {
  group_ = &ProcessGroup::world();
  if (!lead()) spdlog::set_level(spdlog::level::err);  // a rank's own errors only
  set_compute_threads(static_cast<int>(tc_.threads));
  if (lead()) {
    lock_.emplace(io::DirLock::acquire(run_.string(), "output.dir"));
    check_run_dir(run_, options_.resume, cfg_.output.overwrite,
                  {{"model.path", cfg_.model.path},
                   {"data.train", cfg_.data.train},
                   {"data.validation", cfg_.data.validation},
                   {"data.test", cfg_.data.test}});
  }
  load_data_and_model();
  if (lead()) prepare_run_dir(run_, options_.resume, cfg_.resolved);
  plan_schedule();
  // Rank 0 keeps the checkpoints; the other ranks read them to resume and, at the end, to load
  // the selected model (a file system shared by the ranks).
  if (lead() || options_.resume)
    outputs_.store = std::make_unique<CheckpointStore>(run_.string(), cfg_.checkpoint.keep_last);
  std::optional<int64_t> resume_step;
  if (options_.resume) {
    const auto last = outputs_.store->last();
    if (!last)
      throw InputError(fmt::format("{}: no checkpoint to resume from", outputs_.store->root()));
    restore(*last);
    resume_step = state_.step;
  }
  if (lead())
    outputs_.log = std::make_unique<RunLog>(run_.string(), resume_step, cfg_.output.tensorboard);
  spdlog::info(
      "training {} ({}) for {} steps ({} epochs of {} steps): micro-batch {} x {} "
      "accumulation{} = {}, lr {:g}{}, {} threads",
      model_.info().architecture,
      data_.task.causal_lm ? std::string("causal LM")
                           : fmt::format("{} labels", data_.labels.names.size()),
      total_steps_,
      static_cast<double>(total_steps_) / steps_per_epoch_, steps_per_epoch_,
      strategy_->micro_batch(), strategy_->accumulation(),
      group_->distributed() ? fmt::format(" x {} ranks", group_->size()) : "", effective_,
      tc_.learning_rate,
      tc_.layer_decay < 1 ? fmt::format(" (layer decay {:g})", tc_.layer_decay) : "",
      compute_threads());

  if (cfg_.output.progress == ProgressStyle::Auto && lead()) {
    outputs_.progress = ProgressBar::for_stderr(tc_.log_every);
  } else {
    ProgressOptions po;
    po.terminal = cfg_.output.progress == ProgressStyle::Bar && lead();
    po.log_every = tc_.log_every;
    const auto t0 = RunClock::now();
    outputs_.progress = std::make_unique<ProgressBar>(std::cerr, spdlog::default_logger(), po,
                                                      [t0] { return seconds_since(t0); });
  }
  outputs_.gpu_sampler = cuda::device_sampler(plan_.target.device);  // nullptr on the CPU
  if (outputs_.gpu_sampler) {
    if (!outputs_.gpu_sampler->available())
      spdlog::info("GPU sampling off: {}", outputs_.gpu_sampler->reason());
    outputs_.gpu_sampler->start();
    outputs_.progress->set_status([s = outputs_.gpu_sampler.get()] { return s->status_text(); });
  }
  outputs_.progress->begin_training(total_steps_,
                                    (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_);
  prefetch_ = std::make_unique<data::BatchPrefetcher>(
      sampler_
          ? data::BatchPrefetcher::MakeBatch(
                [s = GroupSampler(*sampler_), ex = &data_.train.examples, pad = pad_id_](
                    int64_t step) mutable { return data::make_batch(*ex, s.batch(step), pad); })
          : data::BatchPrefetcher::training_batches(*batcher_, &data_.train.examples, pad_id_),
      state_.step, total_steps_, tc_.prefetch);
  samples_at_start_ = state_.samples;
  tokens_at_start_ = state_.tokens;
  StopSignal stop;
  const char* stop_file_env = std::getenv("FTUNE_STOP_FILE");
  const std::string stop_file = stop_file_env ? stop_file_env : "";
  if (state_.stopped_by != "completed")
    spdlog::info("the run had stopped at step {} ({}); finishing it", state_.step,
                 state_.stopped_by);
  // A restored window's rates count its time before the resume too.
  window_.start = RunClock::now() - std::chrono::duration_cast<RunClock::duration>(
                                        std::chrono::duration<double>(window_.restored_seconds));
  while (state_.step < total_steps_ && state_.stopped_by == "completed") {
    if (state_.step == hooks_.micro_batch_step)
      strategy_->set_micro_batch(hooks_.micro_batch_rows, state_.step);
    try {
      profile::StepRecorder op_profile(state_.step + 1, total_steps_, plan_.target.device);
      train_step();
      if (op_profile.active()) {
        // FTUNE_PROFILE_OPS: the per-op table of the profiled step, logged and written.
        const profile::StepProfile p = op_profile.finish();
        spdlog::info("{}", p.table());
        if (lead()) io::write_json_atomic((run_ / "op_profile.json").string(), p.to_json());
      }
    } catch (const OutOfMemoryError& e) {
      strategy_->recover(e, state_.step);
      continue;  // the same step again, on the same batch
    }
    if (state_.step == hooks_.sigterm_at_step) std::raise(SIGTERM);
    const bool epoch_ended = state_.step % steps_per_epoch_ == 0;
    const bool last = state_.step == total_steps_;
    const bool eval_now =
        data_.validation &&
        ((cfg_.eval.every_steps > 0 && state_.step % cfg_.eval.every_steps == 0) ||
         (cfg_.eval.each_epoch && epoch_ended) || last);
    bool is_best = false, stop_now = false;
    if (eval_now) {
      sync_step_scalars();  // a pending non-finite abort stops the run before it evaluates
      state_.last_eval = run_eval(*data_.validation, "validation");
      const double value = state_.last_eval.value(eval_metric_, std::nan(""));
      is_best = early_->update(value, state_.last_eval.value("loss", std::nan("")), state_.step);
      if (is_best) state_.best_eval = state_.last_eval;
      if (early_->should_stop()) {
        spdlog::info(
            "early stopping: {} has not improved for {} evaluations (best {:.4f} at step {})",
            eval_metric_, early_->evals_without_improvement(), *early_->best(),
            early_->best_step());
        state_.stopped_by = "early_stopping";
        stop_now = true;
      }
      if (options_.on_eval && options_.on_eval(state_.step, state_.last_eval)) {
        state_.stopped_by = "hook";
        stop_now = true;
      }
    }
    // output.save_model false: no weights kept but the periodic checkpoints asked for.
    const bool keep = cfg_.output.save_model;
    const bool periodic = cfg_.checkpoint.every_steps > 0
                              ? state_.step % cfg_.checkpoint.every_steps == 0
                              : keep && eval_now;
    const bool best_checkpoint = keep && is_best && cfg_.checkpoint.save_best;
    if (periodic || (keep && (last || stop_now)) || best_checkpoint)
      save_checkpoint(best_checkpoint);
    // FTUNE_STOP_FILE: a file whose appearance asks the run to stop as a signal would (how a
    // search worker stops a data-parallel trial whose ranks a launcher started: hpo/rank_trial.h).
    bool stop_requested = stop.requested() ||
                          (options_.stop_requested && options_.stop_requested()) ||
                          (!stop_file.empty() && std::filesystem::exists(stop_file));
    // Every rank stops at the same step: a signal may reach the ranks between two of them.
    if (group_->distributed()) stop_requested = group_->any(stop_requested);
    if (stop_requested) {
      if (hooks_.stop_delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(hooks_.stop_delay_ms));
      if (saved_step_ != state_.step) save_checkpoint(false);
      const TrainingWork work = work_over_ranks();
      if (lead())
        io::write_json_atomic((run_ / "summary.json").string(), summary("interrupted", work));
      throw Interrupted(fmt::format("stopped by {} at step {}; checkpoint saved, continue "
                                    "with `ftune train --config ... --resume`",
                                    stop.requested() ? fmt::format("signal {}", stop.signal())
                                                     : std::string("request"),
                                    state_.step),
                        stop.signal());
    }
    if (stop_now) break;
  }
  if (!cfg_.output.save_model) return finish_without_model();
  if (saved_step_ != state_.step) save_checkpoint(false);
  if (group_->distributed()) {  // rank 0's checkpoints are all written: the others read them
    group_->barrier();
    if (!lead())
      outputs_.store = std::make_unique<CheckpointStore>(run_.string(), cfg_.checkpoint.keep_last);
  }

  // The selected model: best on validation (reloaded for the test split), else the last.
  const auto best = outputs_.store->best();
  const auto chosen = best ? *best : *outputs_.store->last();
  if (chosen.step != state_.step) load_weights_from(chosen.dir);
  outputs_.progress->finish();
  nlohmann::json test_metrics;
  if (data_.test) test_metrics = run_eval(*data_.test, "test");
  const TrainingWork work = work_over_ranks();
  if (!lead()) return nlohmann::json::object();  // rank 0 publishes and summarises
  const std::string model_dir = (run_ / "model").string();
  publish_selected(chosen, model_dir);
  if (outputs_.gpu_sampler)
    outputs_.gpu_sampler->stop();  // the summary's GPU figures cover the whole run
  if (!plan_.target.device.is_cpu()) gemm_autotune_save();  // the algorithms timed since step 1
  nlohmann::json s = summary(state_.stopped_by, work);
  s["test"] = test_metrics;
  s["model_dir"] = model_dir;
  s["model_step"] = chosen.step;
  io::write_json_atomic((run_ / "summary.json").string(), s);
  spdlog::info("done in {:.1f} s ({}): model of step {} saved to {}", seconds_since(t_start_),
               state_.stopped_by, chosen.step, model_dir);
  return s;
}

nlohmann::json Trainer::finish_without_model() {
  // output.save_model false: the last weights score the test split; nothing is published.
  outputs_.progress->finish();
  nlohmann::json test_metrics;
  if (data_.test) test_metrics = run_eval(*data_.test, "test");
  const TrainingWork work = work_over_ranks();
  if (!lead()) return nlohmann::json::object();
  if (outputs_.gpu_sampler) outputs_.gpu_sampler->stop();
  if (!plan_.target.device.is_cpu()) gemm_autotune_save();
  nlohmann::json s = summary(state_.stopped_by, work);
  s["test"] = test_metrics;
  s["model_step"] = state_.step;  // the weights the test split saw; not saved
  io::write_json_atomic((run_ / "summary.json").string(), s);
  spdlog::info("done in {:.1f} s ({}): no model saved (output.save_model false)",
               seconds_since(t_start_), state_.stopped_by);
  return s;
}

nlohmann::json run_training(const TrainConfig& config, const TrainOptions& options) {
  Trainer trainer(config, options);
  return trainer.run();
}

}  // namespace ftune
