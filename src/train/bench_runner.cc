// `ftune bench`'s runner (see bench_runner.h): the shared data and model, one measured run of a
// configuration, and the variants' aggregation over repeats.
//
// Report (run_bench's JSON): model, device, steps, warmup, repeats, effective_batch, and
// "variants", the default first, each with
//   name, setting (the variant's, as the table shows it), default_setting, overrides, status
//   ("ran"; "same as default" when the flip resolved back to the default's setting on this
//   device; "not applicable"; "not run" when the configuration or the device refused it,
//   "failed" when it failed while running), reason,
//   samples_per_s, tokens_per_s (real tokens), mfu (null where the GPU's peak is unknown or on the
//   CPU), planned_bytes, measured_bytes, micro_batch (text) — medians over the repeats —,
//   speedup_of_default {median, min, max} (default samples/s over the variant's, per repeat),
//   loss_mean and loss_vs_default (the repeat's relative difference with the largest magnitude),
//   runs (each repeat's numbers, setup and warm-up seconds apart), and summary (the first run's
//   settings and its step strategy's report, the fields summary.json has).
#include "train/bench_runner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/memory.h"
#include "core/thread_pool.h"
#include "data/batcher.h"
#include "data/prefetcher.h"
#include "models/hf_checkpoint.h"
#include "optim/lr_schedule.h"
#include "optim/step_scalars.h"
#include "train/batch_plan.h"
#include "train/bench_switches.h"
#include "train/debug_hooks.h"
#include "train/flops.h"
#include "train/input_staging.h"
#include "train/single_device_step.h"
#include "train/train_data.h"

namespace ftune {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string on_off(bool on) { return on ? "on" : "off"; }

// What every run shares: the configuration as given, the tokenized data, the model spec, the
// step batches' source, the schedule and the initial weights (taken from the first run).
struct Shared {
  TrainConfig base;
  TrainData data;
  ModelSpec model;
  LoadOptions load;
  LossOptions loss;
  int32_t pad_id = 0;
  int64_t max_length = 0;  // data.max_length clipped to the model: Tv of the dropout streams
  std::unique_ptr<data::LengthBucketedBatcher> batcher;
  LrSchedule schedule;
  DebugHooks hooks;  // none: the strategies keep a reference
  std::optional<HostTensor> initial;
};

// The learning rates of the configured run's first steps (its schedule over its own length).
LrSchedule run_schedule(const TrainConfig& cfg, int64_t steps_per_epoch) {
  const auto& tc = cfg.training;
  const int64_t total = tc.max_steps > 0 ? tc.max_steps : tc.epochs * steps_per_epoch;
  const int64_t warmup = tc.warmup_steps > 0
                             ? tc.warmup_steps
                             : static_cast<int64_t>(std::ceil(tc.warmup_ratio * total));
  return LrSchedule{tc.schedule, tc.learning_rate, warmup, total};
}

void load_shared(Shared& sh) {
  const TrainConfig& cfg = sh.base;
  const text::Tokenizer tok = load_run_tokenizer(cfg);
  sh.max_length = usable_max_length(cfg);
  sh.data = load_train_data(cfg, tok, sh.max_length);
  sh.load.reinit_mismatched_head = true;
  sh.load.init_seed = cfg.training.seed;
  if (sh.data.task.causal_lm)
    sh.load.causal_lm = true;  // model.task causal_lm
  else
    sh.load.labels = sh.data.labels.names;
  const auto& tc = cfg.training;
  sh.model = load_model_spec(cfg.model.path, sh.load)
                 .with_dropout({static_cast<float>(tc.hidden_dropout),
                                static_cast<float>(tc.attention_dropout),
                                static_cast<float>(tc.classifier_dropout)});
  sh.loss.kind = sh.data.task.loss;
  sh.loss.label_smoothing = static_cast<float>(tc.label_smoothing);
  sh.loss.class_weights = resolve_class_weights(tc, sh.data.labels.names);
  sh.pad_id = static_cast<int32_t>(sh.model.info().pad_token_id);
  sh.batcher = std::make_unique<data::LengthBucketedBatcher>(&sh.data.train.examples,
                                                             cfg.effective_batch(), tc.seed);
  sh.schedule = run_schedule(cfg, sh.batcher->batches_per_epoch());
}

// The settings a run really resolved, per switch name: value (compared with the default's),
// text (the table's) and why (the resolver's reason).
nlohmann::json settings_of(const TrainConfig& cfg, const RunBatchPlan& plan,
                           const nlohmann::json& report) {
  const auto entry = [](nlohmann::json value, std::string text, std::string why) {
    return nlohmann::json{{"value", std::move(value)}, {"text", std::move(text)}, {"why", why}};
  };
  const Device device = plan.target.device;
  const auto& tc = cfg.training;
  const Precision precision = plan.precision.precision;
  const ResolvedTf32 tf32 = resolve_tf32(tc.tf32, device, precision);
  const PadRule pad = resolve_padding(tc.pad_to_multiple_of, device);
  const int64_t rows = report.at("micro_batch").get<int64_t>();
  const int64_t acc = report.at("gradient_accumulation").get<int64_t>();
  const int64_t tokens = report.value("micro_batch_tokens", int64_t{0});
  const bool packed = report.at("packing").at("on").get<bool>();
  const bool ckpt = report.at("gradient_checkpointing").get<bool>();
  const bool graphs = report.at("cuda_graphs").at("on").get<bool>();
  const std::string kernel = attention_kernel_name(plan.attention.kernel);
  nlohmann::json s;
  s["precision"] = entry(precision_name(precision), std::string(precision_name(precision)),
                         plan.precision.reason);
  s["tf32"] = entry(tf32.on, on_off(tf32.on), tf32.reason);
  s["attention"] = entry(kernel, kernel, plan.attention.reason);
  s["cuda_graphs"] =
      entry(graphs, on_off(graphs), report.at("cuda_graphs").at("why").get<std::string>());
  s["packing"] = entry(packed, on_off(packed), plan.packing.why);
  s["padding"] = entry({{"multiple", pad.multiple}, {"buckets", pad.buckets}}, pad.describe(),
                       tc.pad_to_multiple_of > 0
                           ? fmt::format("training.pad_to_multiple_of {}", tc.pad_to_multiple_of)
                           : "training.pad_to_multiple_of auto");
  s["checkpointing"] = entry(ckpt, on_off(ckpt), plan.choice.reason);
  s["micro_batch"] =
      entry({{"rows", rows}, {"accumulation", acc}, {"tokens", tokens}},
            packed ? fmt::format("{} tok x {}", tokens, acc) : fmt::format("{} x {}", rows, acc),
            tc.batch_size > 0 ? fmt::format("training.batch_size {}", tc.batch_size)
                              : plan.choice.reason);
  s["prefetch"] = entry(tc.prefetch, std::to_string(tc.prefetch), "training.prefetch");
  s["threads"] = entry(compute_threads(), std::to_string(compute_threads()), "training.threads");
  return s;
}

TrainingWork work_since(const TrainingWork& now, const TrainingWork& before) {
  TrainingWork w = now;
  w.sequences -= before.sequences;
  w.padded_tokens -= before.padded_tokens;
  w.real_tokens -= before.real_tokens;
  w.padded_flops -= before.padded_flops;
  w.real_flops -= before.real_flops;
  return w;
}

// One configuration built: its plan, its strategy (with the initial weights) and its settings.
struct Built {
  RunBatchPlan plan;
  std::unique_ptr<StepStrategy> strategy;
  nlohmann::json settings;
  double setup_seconds = 0;
};

Built build(Shared& sh, const TrainConfig& cfg) {
  const auto t0 = Clock::now();
  Built b;
  BatchPlanOptions options;
  options.device = training_device(cfg);
  options.plan_for_run = false;  // its steps cycle through batches of its own (measure())
  b.plan = plan_run_batch(cfg, sh.model, sh.data, sh.max_length, options);
  b.strategy = std::make_unique<SingleDeviceStep>(cfg, sh.model, b.plan, sh.max_length, sh.loss,
                                                  sh.hooks);
  SequenceClassifier& clf = b.strategy->model();
  if (!sh.initial) {  // the first run loads the weights; the others copy them
    load_model_weights(clf, cfg.model.path, sh.load);
    sh.initial.emplace(DType::F32, clf.param_values().shape);
    copy(sh.initial->view(), clf.param_values());
  } else {
    copy(clf.param_values(), sh.initial->view());
    clf.frozen_weights_changed();
  }
  if (clf.adapters_on()) clf.init_adapters(cfg.training.seed);
  b.settings = settings_of(cfg, b.plan, b.strategy->report());
  b.setup_seconds = since(t0);
  return b;
}

// The measured part of a run: `warmup` steps, then `steps` timed ones over the same batches.
nlohmann::json measure(Shared& sh, const TrainConfig& cfg, Built& b, int64_t steps,
                       int64_t warmup) {
  StepStrategy& st = *b.strategy;
  const TensorView scalars = st.optimizer().step_scalars();
  auto make = data::BatchPrefetcher::training_batches(*sh.batcher, &sh.data.train.examples,
                                                      sh.pad_id);
  data::BatchPrefetcher prefetch([make, steps](int64_t i) { return make(i % steps); }, 0,
                                 warmup + steps, cfg.training.prefetch);
  int64_t micro_batches = 0, samples = 0, tokens = 0;
  const auto one_step = [&](int64_t i) {
    Batch batch = prefetch.next();
    st.prepare_batch(batch);
    while (true) {
      try {
        micro_batches +=
            st.step(batch, StepRequest{i, sh.schedule.lr(i), micro_batches}).micro_batches;
        break;
      } catch (const OutOfMemoryError& e) {
        st.recover(e, i);  // the same step again, smaller
      }
    }
    return batch;
  };
  const auto t_warm = Clock::now();
  for (int64_t i = 0; i < warmup; ++i) one_step(i);
  read_step_scalars(scalars);  // waits for the device
  const double warmup_seconds = since(t_warm);
  st.sample_device_memory();
  step_scalars_set(scalars, kWindowLoss, 0.0);
  const TrainingWork work_before = st.work();
  const double wait_before = prefetch.wait_seconds();
  const auto t0 = Clock::now();
  for (int64_t i = warmup; i < warmup + steps; ++i) {
    const Batch batch = one_step(i);
    samples += batch.size;
    tokens += batch.real_tokens();
  }
  const StepScalarValues v = read_step_scalars(scalars);  // waits for the device
  const double seconds = std::max(since(t0), 1e-9);
  st.sample_device_memory();
  const nlohmann::json report = st.report();
  const double sps = samples / seconds;
  const nlohmann::json flops =
      flops_summary(work_since(st.work(), work_before), sps, b.plan.target.device,
                    b.plan.precision.precision, tf32_gemms_on());
  const nlohmann::json& memory = report.at("memory");
  const bool cpu = b.plan.target.device.is_cpu();
  nlohmann::json r = {
      {"samples_per_s", sps},
      {"tokens_per_s", tokens / seconds},
      {"seconds", seconds},
      {"setup_seconds", b.setup_seconds},
      {"warmup_seconds", warmup_seconds},
      {"input_wait_seconds", prefetch.wait_seconds() - wait_before},
      {"loss_mean", v[kWindowLoss] / static_cast<double>(steps)},
      {"skipped_steps", v[kSkippedSteps]},
      {"mfu", flops.is_object() && flops.contains("mfu") ? flops["mfu"] : nlohmann::json()},
      {"padding_fraction", flops.is_object() ? flops.value("padding_fraction", 0.0) : 0.0},
      {"planned_bytes", memory.at("planned_total_bytes")},
      {"measured_bytes", cpu ? memory.value("touched_bytes", nlohmann::json())
                             : memory.value("measured_device_bytes", nlohmann::json())},
      {"measured_as", cpu ? "arena bytes touched" : "device memory taken"},
      {"micro_batch", b.settings["micro_batch"]["text"]}};
  nlohmann::json summary = report;
  summary["settings"] = b.settings;
  if (flops.is_object()) summary.update(flops);
  r["summary"] = summary;
  return r;
}

// One run of `cfg` with the compute threads it asks for (the CPU kernels' scratch is planned per
// thread, so they are set before planning and restored after).
struct ThreadsFor {
  explicit ThreadsFor(const TrainConfig& cfg) : before(compute_threads()) {
    set_compute_threads(static_cast<int>(cfg.training.threads));
  }
  ~ThreadsFor() { set_compute_threads(before); }
  int before;
};

struct Variant {
  std::string name;
  SwitchFlip flip;
  std::optional<TrainConfig> config;
  std::string status, reason, default_setting;
  std::vector<nlohmann::json> runs;
};

void aggregate(Variant& v, const Variant* def, nlohmann::json& out) {
  out["status"] = v.status;
  if (!v.reason.empty()) out["reason"] = v.reason;
  if (v.runs.empty()) return;
  const auto med = [&](const char* key) {
    std::vector<double> xs;
    for (const auto& r : v.runs)
      if (r[key].is_number()) xs.push_back(r[key].get<double>());
    return xs.empty() ? nlohmann::json() : nlohmann::json(median(xs));
  };
  for (const char* key : {"samples_per_s", "tokens_per_s", "mfu", "planned_bytes",
                          "measured_bytes", "setup_seconds", "warmup_seconds", "loss_mean"})
    out[key] = med(key);
  out["micro_batch"] = v.runs.front()["micro_batch"];
  out["summary"] = v.runs.front()["summary"];
  nlohmann::json runs = nlohmann::json::array();
  for (nlohmann::json r : v.runs) {
    r.erase("summary");
    runs.push_back(r);
  }
  out["runs"] = runs;
  if (!def) return;
  std::vector<double> speedups;
  double loss_diff = 0;
  for (size_t i = 0; i < v.runs.size() && i < def->runs.size(); ++i) {
    speedups.push_back(def->runs[i]["samples_per_s"].get<double>() /
                       v.runs[i]["samples_per_s"].get<double>());
    const double d = def->runs[i]["loss_mean"].get<double>();
    const double rel = (v.runs[i]["loss_mean"].get<double>() - d) / std::max(std::abs(d), 1e-30);
    if (std::abs(rel) > std::abs(loss_diff) || !std::isfinite(rel)) loss_diff = rel;
  }
  out["speedup_of_default"] = {{"median", median(speedups)},
                               {"min", *std::min_element(speedups.begin(), speedups.end())},
                               {"max", *std::max_element(speedups.begin(), speedups.end())}};
  out["loss_vs_default"] = loss_diff;
}

}  // namespace

nlohmann::json run_bench(const BenchOptions& o) {
  const std::vector<const BenchSwitch*> switches = select_switches(o.only);
  if (o.steps < 1) throw InputError("--steps must be at least 1");
  if (o.repeats < 1) throw InputError("--repeats must be at least 1");
  Shared sh;
  sh.base = TrainConfig::load(o.config, o.overrides);
  set_compute_threads(static_cast<int>(sh.base.training.threads));  // tokenization too
  const Device device = training_device(sh.base);
  load_shared(sh);
  const int64_t warmup = o.warmup >= 0 ? o.warmup : device.is_cpu() ? 1 : 2 * o.steps;

  Variant def{"default", {}, sh.base, "ran", "", "", {}};
  std::vector<Variant> variants;
  for (const BenchSwitch* s : switches) variants.push_back({s->name, {}, std::nullopt, "", "", "", {}});
  nlohmann::json default_settings;

  const auto run_one = [&](Variant& v, int64_t repeat) {
    ThreadsFor threads(*v.config);
    Built b = build(sh, *v.config);
    if (&v != &def && repeat == 0) {
      // The flip must have taken effect: the variant's own setting differs from the default's.
      const nlohmann::json& mine = b.settings.at(v.name);
      if (mine.at("value") == default_settings.at(v.name).at("value")) {
        v.status = "same as default";
        v.reason = fmt::format("{} resolves to {} here: {}", fmt::join(v.flip.overrides, " "),
                               mine.at("text").get<std::string>(), mine.at("why").get<std::string>());
        return;
      }
      v.status = "ran";
    }
    nlohmann::json r = measure(sh, *v.config, b, o.steps, warmup);
    r["repeat"] = repeat;
    spdlog::info("bench: {} {} (repeat {} of {}): {:.2f} samples/s, {:.0f} tokens/s, loss {:.5f}",
                 v.name, v.flip.setting, repeat + 1, o.repeats, r["samples_per_s"].get<double>(),
                 r["tokens_per_s"].get<double>(), r["loss_mean"].get<double>());
    if (&v == &def && repeat == 0) default_settings = r["summary"]["settings"];
    v.runs.push_back(std::move(r));
  };

  for (int64_t repeat = 0; repeat < o.repeats; ++repeat) {
    run_one(def, repeat);  // errors in the default run are the configuration's: they stop here
    for (size_t k = 0; k < variants.size(); ++k) {
      Variant& v = variants[k];
      if (repeat == 0) {
        v.flip = switches[k]->flip(sh.base, default_settings);
        if (!v.flip.skip.empty()) {
          v.status = "not applicable";
          v.reason = v.flip.skip;
          continue;
        }
        std::vector<std::string> overrides = o.overrides;
        overrides.insert(overrides.end(), v.flip.overrides.begin(), v.flip.overrides.end());
        try {
          v.config = TrainConfig::load(o.config, overrides);
        } catch (const Error& e) {
          v.status = "not run";
          v.reason = e.what();
          continue;
        }
      }
      if (v.status != "" && v.status != "ran") continue;
      try {
        run_one(v, repeat);
      } catch (const Error& e) {
        // A setting the device or build refuses (cuda_graphs on on a CPU), or a run that failed.
        v.status = v.runs.empty() ? "not run" : "failed";
        v.reason = e.what();
        v.runs.clear();
        spdlog::info("bench: {} {}: {}", v.name, v.status, v.reason);
      }
    }
  }

  nlohmann::json rows = nlohmann::json::array();
  const auto text_of = [](const nlohmann::json& settings, const std::string& name) {
    return settings.contains(name) ? settings[name]["text"].get<std::string>() : std::string();
  };
  nlohmann::json d = {{"name", "default"}, {"setting", "ftune's defaults"}, {"overrides", {}}};
  aggregate(def, nullptr, d);
  rows.push_back(d);
  for (Variant& v : variants) {
    nlohmann::json j = {{"name", v.name},
                        {"setting", v.flip.setting},
                        {"default_setting", text_of(default_settings, v.name)},
                        {"overrides", v.flip.overrides}};
    aggregate(v, &def, j);
    rows.push_back(j);
  }
  return {{"model", sh.model.info().architecture},
          {"source", sh.base.model.path},
          {"device", device_name(device)},
          {"gpu", gpu_name(device)},
          {"precision", text_of(default_settings, "precision")},
          {"effective_batch", sh.base.effective_batch()},
          {"steps", o.steps},
          {"warmup", warmup},
          {"repeats", o.repeats},
          {"train_rows", sh.data.train.examples.size()},
          {"variants", rows}};
}

}  // namespace ftune
