// The run loop's checkpoints (see trainer_run.h): what trainer_state.json records, so a resumed
// run replays exactly the arithmetic of an uninterrupted one (same thread count): the data cursor,
// the micro-batch in use, the optimizer's moments and device step scalars, the loss scale, the
// early-stopping state and the logging window; and what a resume refuses (the model, tokenizer,
// data, trajectory-relevant configuration or label set changed since).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "core/thread_pool.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/peft_adapter.h"
#include "train/run_dir.h"
#include "train/trainer_run.h"
#include "train/trainer_state.h"

namespace ftune {

namespace fs = std::filesystem;

void Trainer::restore(const CheckpointEntry& ckpt) {
  const std::string state_path = (fs::path(ckpt.dir) / "trainer_state.json").string();
  const TrainerState s = read_trainer_state(state_path);
  const nlohmann::json now = run_fingerprints(cfg_, data_);
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
  if (s.ranks != group_->size())
    spdlog::warn(
        "resuming on {} rank(s); the checkpoint was written by {}: the step batches and the "
        "trajectory are the same, up to float summation order",
        group_->size(), s.ranks);

  load_weights_from(ckpt.dir);
  AdamW& adamw = strategy_->optimizer();
  const auto opt =
      io::SafetensorsFile::open((fs::path(ckpt.dir) / "optimizer.safetensors").string());
  opt.read_into("exp_avg", adamw.exp_avg());
  opt.read_into("exp_avg_sq", adamw.exp_avg_sq());
  state_.step = s.step;
  state_.micro_batches = s.micro_batches;
  // The micro-batch in use when the checkpoint was written (smaller than configured after an
  // out-of-memory fallback): the same cut of every step, so the same bits as without the kill.
  // The plan already continues with it (Trainer::plan_batch). The arena holds the run's largest
  // micro-batch, which may have fewer rows than the micro-batch allows (a rank's share of a step,
  // a small data set): then every micro-batch is cut the same anyway, unless the ranks changed.
  if (s.micro_batch <= strategy_->max_batch())
    strategy_->set_micro_batch(s.micro_batch, state_.step);
  else if (s.ranks != group_->size())
    spdlog::warn(
        "the checkpoint ran micro-batches of {} rows, more than the {} rows per micro-batch this "
        "run's memory plan holds: it continues with micro-batches of at most {} rows, and its "
        "results match an uninterrupted run's only up to float summation order",
        s.micro_batch, strategy_->max_batch(), strategy_->max_batch());
  state_.samples = s.samples;
  state_.tokens = s.real_tokens;
  state_.skipped = s.skipped_steps;
  if (s.loss_scale) strategy_->loss_scaler().restore(*s.loss_scale, s.loss_scale_good_steps);
  state_.nonfinite_in_row = s.nonfinite_in_row;
  // What the device keeps between reads (step_scalars.h), the logging window's loss sum included.
  StepScalarValues scalars{};
  if (s.window) {
    window_.steps = s.window->steps;
    window_.samples = s.window->samples;
    window_.tokens = s.window->real_tokens;
    scalars[kWindowLoss] = s.window->loss_sum;
    window_.restored_seconds = s.window->seconds;
  }
  state_.stopped_by = s.stopped_by;
  scalars[kAdamSteps] = static_cast<double>(s.optimizer_steps);
  scalars[kSkippedSteps] = static_cast<double>(state_.skipped);
  scalars[kNonfiniteInRow] = static_cast<double>(state_.nonfinite_in_row);
  scalars[kStepsFinished] = static_cast<double>(state_.step);
  write_step_scalars(adamw.step_scalars(), scalars);
  state_.train_seconds = s.train_seconds;
  state_.wait_seconds = s.input_wait_seconds;
  state_.best_eval = s.best_eval;
  state_.last_eval = s.last_eval;
  early_->restore(s.early_stopping, state_path + ": early_stopping");
  saved_step_ = state_.step;
  spdlog::info("resumed from {} at step {} (epoch {}, micro-batch {} x {})", ckpt.dir, state_.step,
               epoch_of(state_.step), strategy_->micro_batch(), strategy_->accumulation());
}

void Trainer::load_weights_from(const std::string& dir) {
  if (clf().adapters_on()) {
    load_peft_adapter(clf(), dir);  // the frozen base weights stay as loaded at setup
  } else {
    LoadOptions load;
    if (data_.task.causal_lm)
      load.causal_lm = true;
    else
      load.labels = data_.labels.names;
    load_model_weights(clf(), dir, load);
  }
}

void Trainer::write_checkpoint(const std::string& dir, const StepScalarValues& scalars) {
  if (clf().adapters_on())
    save_peft_adapter(clf(), dir, cfg_.model.path);  // PEFT format: adapters + head
  else
    save_model(clf(), dir);
  copy_tokenizer_files(cfg_.model.path, dir);
  if (data_.pair_template) text::save_pair_template(dir, *data_.pair_template);
  const AdamW& adamw = strategy_->optimizer();
  io::write_safetensors((fs::path(dir) / "optimizer.safetensors").string(),
                        {{"exp_avg", adamw.exp_avg(), std::nullopt},
                         {"exp_avg_sq", adamw.exp_avg_sq(), std::nullopt}});
  const LossScaler& scaler = strategy_->loss_scaler();
  nlohmann::json s;
  s["version"] = 2;
  s["step"] = state_.step;  // the data cursor: the next step trains on step batch `step`
  s["epoch"] = epoch_of(state_.step);
  s["micro_batch"] = strategy_->micro_batch();
  s["micro_tokens"] = strategy_->micro_tokens();
  s["micro_batches"] = state_.micro_batches;
  s["optimizer_steps"] = static_cast<int64_t>(scalars[kAdamSteps]);
  s["samples"] = state_.samples;
  s["real_tokens"] = state_.tokens;
  s["skipped_steps"] = state_.skipped;
  s["nonfinite_in_row"] = state_.nonfinite_in_row;
  s["loss_scale"] = scaler.scale();
  s["loss_scale_good_steps"] = scaler.good_steps();
  s["train_seconds"] = state_.train_seconds;
  s["input_wait_seconds"] = state_.wait_seconds;
  // The logging window so far (steps since the last train line), exact on resume.
  s["window"] = {{"steps", window_.steps},
                 {"samples", window_.samples},
                 {"real_tokens", window_.tokens},
                 {"loss_sum", scalars[kWindowLoss]},
                 {"seconds", seconds_since(window_.start)}};
  s["stopped_by"] = state_.stopped_by;
  s["best_eval"] = state_.best_eval;
  s["last_eval"] = state_.last_eval;
  s["early_stopping"] = early_->state();
  s["seed"] = tc_.seed;
  s["gradient_checkpointing"] = strategy_->checkpointing() == GradientCheckpointing::On;
  s["threads"] = compute_threads();
  s["ranks"] = group_->size();  // data-parallel ranks (a resume may use another count)
  s["fingerprints"] = run_fingerprints(cfg_, data_);
  io::write_json_atomic((fs::path(dir) / "trainer_state.json").string(), s);
}

void Trainer::save_checkpoint(bool best) {
  const auto t0 = RunClock::now();
  // The step scalars first: a pending non-finite abort stops the run before anything is written.
  const StepScalarValues scalars = sync_step_scalars();
  if (!lead()) {  // rank 0 writes; its replica is this one
    saved_step_ = state_.step;
    if (state_.step == hooks_.exit_after_checkpoint) exit_as_killed();
    return;
  }
  const std::string dir = outputs_.store->save(
      state_.step, best, [&](const std::string& d) { write_checkpoint(d, scalars); });
  saved_step_ = state_.step;
  spdlog::info("checkpoint {}{} ({:.1f} s)", dir, best ? " (best so far)" : "", seconds_since(t0));
  if (state_.step == hooks_.exit_after_checkpoint) exit_as_killed();
}

StepScalarValues Trainer::sync_step_scalars() {
  const StepScalarValues v = read_step_scalars(strategy_->optimizer().step_scalars());
  const int64_t skipped = static_cast<int64_t>(v[kSkippedSteps]);
  if (skipped > state_.skipped)
    spdlog::warn(
        "{} step(s) with non-finite loss or gradients up to step {} (last step: loss {} / gradient "
        "norm {}); update skipped, weights and moments untouched",
        skipped - state_.skipped, state_.step, v[kLastStepLoss], v[kGradNorm]);
  state_.skipped = skipped;
  state_.nonfinite_in_row = static_cast<int64_t>(v[kNonfiniteInRow]);
  if (v[kAbortStep] != 0.0)
    throw Error(fmt::format(
        "{} consecutive steps with non-finite loss or gradients (training.max_nonfinite_steps); "
        "stopping at step {}. Lower training.learning_rate or check the data",
        tc_.max_nonfinite_steps, static_cast<int64_t>(v[kAbortStep])));
  return v;
}

}  // namespace ftune
