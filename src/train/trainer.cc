// Training run (see trainer.h). The step owns the order of operations; evaluation and saving
// hang off it. Everything the step touches was planned into one arena before the first step.
#include "train/trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/memory.h"
#include "core/thread_pool.h"
#include "data/batcher.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "models/hf_checkpoint.h"
#include "train/adamw.h"
#include "train/grad_clip.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"

namespace ftune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Split {
  std::string path;
  std::vector<data::TokenizedExample> examples;
};

Split load_split(const std::string& path, const data::ExampleFields& fields,
                 const text::Tokenizer& tok, const data::LabelSet& labels, int64_t max_length,
                 const char* name) {
  Split s{path, {}};
  const auto raw = data::read_examples(path, fields);
  data::TokenizeStats stats;
  s.examples = data::tokenize_examples(tok, raw, labels, path, max_length, &stats);
  spdlog::info("{}: {} examples from {}, {:.1f} tokens on average, longest {}, {} truncated to {}",
               name, s.examples.size(), path, double(stats.tokens) / s.examples.size(),
               stats.longest, stats.truncated, max_length);
  return s;
}

int64_t longest(const Split& s) {
  int64_t n = 0;
  for (const auto& e : s.examples) n = std::max<int64_t>(n, e.input_ids.size());
  return n;
}

nlohmann::json evaluate(SequenceClassifier& model, const Split& split, int64_t batch_size,
                        int32_t pad_id, const LossOptions& loss_options) {
  ClassificationMetrics metrics(model.config().num_labels());
  const int64_t K = model.config().num_labels();
  HostTensor logits(DType::F32, {batch_size, K});
  for (const auto& indices : data::length_sorted_batches(split.examples, batch_size)) {
    const Batch b = data::make_batch(split.examples, indices, pad_id);
    model.set_batch(b);
    const TensorView out = model.forward(DropoutPlan{});
    const float loss = to_host_scalar(model.loss(loss_options));
    metrics.add_loss(double(loss) * b.size, b.size);
    copy(logits.view().prefix({b.size, K}), out);
    for (int64_t r = 0; r < b.size; ++r) metrics.add(logits.data<float>() + r * K, b.labels[r]);
  }
  return metrics.to_json();
}

void copy_tokenizer_files(const std::string& from, const std::string& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.txt", "sentencepiece.bpe.model", "merges.txt", "vocab.json"}) {
    const fs::path src = fs::path(from) / name;
    if (fs::exists(src))
      io::write_file_atomic((fs::path(to) / name).string(), io::read_file(src.string()));
  }
}

}  // namespace

nlohmann::json run_training(const TrainConfig& cfg) {
  const auto t_start = Clock::now();
  const auto& tc = cfg.training;
  set_compute_threads(static_cast<int>(tc.threads));
  fs::create_directories(cfg.output.dir);
  {
    YAML::Emitter out;
    out << cfg.resolved;
    io::write_file_atomic((fs::path(cfg.output.dir) / "config.yaml").string(),
                          std::string(out.c_str()) + "\n");
  }

  // Data and labels.
  const text::Tokenizer tok = text::Tokenizer::from_dir(cfg.model.path);
  const data::ExampleFields fields{cfg.data.text_field, cfg.data.text_pair_field,
                                   cfg.data.label_field};
  const auto raw_train = data::read_examples(cfg.data.train, fields);
  const data::LabelSet labels = cfg.model.labels.empty()
                                    ? data::LabelSet::from_examples(raw_train)
                                    : data::LabelSet::from_names(cfg.model.labels);
  if (labels.names.size() < 2)
    throw InputError(fmt::format("{}: every example has the label '{}'; classification needs at least 2 labels "
                                 "(regression and single-score reranker losses are not supported yet)",
                                 cfg.data.train, labels.names.front()));
  LoadOptions load;
  load.labels = labels.names;
  load.reinit_mismatched_head = true;
  load.init_seed = tc.seed;
  EncoderConfig model_config = load_model_config(cfg.model.path, load);
  int64_t max_length = cfg.data.max_length;
  const int64_t positions = model_config.max_position_embeddings -
                            (model_config.roberta_like() ? model_config.pad_token_id + 1 : 0);
  if (max_length > positions) {
    spdlog::warn("data.max_length {} exceeds the model's {} positions; using {}", max_length,
                 positions, positions);
    max_length = positions;
  }
  const Split train = load_split(cfg.data.train, fields, tok, labels, max_length, "train");
  std::optional<Split> validation, test;
  if (!cfg.data.validation.empty())
    validation = load_split(cfg.data.validation, fields, tok, labels, max_length, "validation");
  if (!cfg.data.test.empty())
    test = load_split(cfg.data.test, fields, tok, labels, max_length, "test");

  // Plan the arena: model (parameters, gradients, activations for the longest batch) + AdamW.
  int64_t max_seq = longest(train);
  if (validation) max_seq = std::max(max_seq, longest(*validation));
  if (test) max_seq = std::max(max_seq, longest(*test));
  SequenceClassifier model(model_config, {tc.batch_size, max_seq, true});
  AdamW adamw(model.params(),
              AdamWOptions{static_cast<float>(tc.learning_rate), static_cast<float>(tc.adam_beta1),
                           static_cast<float>(tc.adam_beta2), static_cast<float>(tc.adam_epsilon),
                           static_cast<float>(tc.weight_decay)});
  ArenaPlan plan;
  model.add_to_plan(plan);
  adamw.add_to_plan(plan);
  std::string plan_text;
  nlohmann::json plan_json = nlohmann::json::object();
  for (const auto& [group, bytes] : plan.bytes_by_group()) {
    plan_text += fmt::format(" {} {:.1f} MiB", group, bytes / double(1 << 20));
    plan_json[group] = bytes;
  }
  Arena arena(Device::cpu(), std::move(plan));
  spdlog::info("arena: {:.1f} MiB for batches up to {} x {} ({})",
               arena.capacity() / double(1 << 20), tc.batch_size, max_seq, plan_text.substr(1));
  model.bind(arena);
  adamw.bind(arena);
  const LoadReport report = load_model_weights(model, cfg.model.path, load);

  // Schedule.
  const data::LengthBucketedBatcher batcher(&train.examples, tc.batch_size, tc.seed);
  const int64_t total_steps =
      tc.max_steps > 0 ? tc.max_steps : tc.epochs * batcher.batches_per_epoch();
  const LrSchedule schedule{parse_schedule_kind(tc.schedule, "training.schedule"), tc.learning_rate,
                            static_cast<int64_t>(std::ceil(tc.warmup_ratio * total_steps)),
                            total_steps};
  LossOptions loss_options;
  loss_options.label_smoothing = static_cast<float>(tc.label_smoothing);
  loss_options.class_weights.assign(tc.class_weights.begin(), tc.class_weights.end());
  const int32_t pad_id = static_cast<int32_t>(model_config.pad_token_id);
  spdlog::info("training {} ({} labels) for {} steps: batch {}, lr {:g}, {} threads",
               model_config.architecture(), labels.names.size(), total_steps, tc.batch_size,
               tc.learning_rate, compute_threads());

  // metrics.jsonl is a log: complete lines are appended and flushed as they happen.
  const std::string metrics_path = (fs::path(cfg.output.dir) / "metrics.jsonl").string();
  std::ofstream metrics_log(metrics_path, std::ios::trunc);
  if (!metrics_log) throw InputError(fmt::format("{}: cannot open for writing", metrics_path));
  auto log_metrics = [&](const nlohmann::json& j) {
    metrics_log << j.dump() << "\n" << std::flush;
  };
  nlohmann::json best_eval, last_eval;
  auto run_eval = [&](int64_t step, int64_t epoch) {
    if (!validation) return;
    const auto t0 = Clock::now();
    last_eval = evaluate(model, *validation, tc.batch_size, pad_id, loss_options);
    last_eval["step"] = step;
    last_eval["epoch"] = epoch;
    spdlog::info("eval step {}: loss {:.4f} accuracy {:.4f} macro-F1 {:.4f} ({:.1f} s)", step,
                 last_eval["loss"].get<double>(), last_eval["accuracy"].get<double>(),
                 last_eval["macro_f1"].get<double>(), seconds_since(t0));
    nlohmann::json line = last_eval;
    line["split"] = "validation";
    log_metrics(line);
    if (best_eval.is_null() ||
        last_eval["macro_f1"].get<double>() > best_eval["macro_f1"].get<double>())
      best_eval = last_eval;
  };

  int64_t step = 0, skipped = 0, real_tokens = 0, samples = 0;
  double train_seconds = 0, loss_window = 0;
  int64_t window_steps = 0, window_samples = 0, window_tokens = 0;
  auto window_start = Clock::now();
  for (int64_t epoch = 0; step < total_steps; ++epoch) {
    for (const auto& indices : batcher.epoch(epoch)) {
      if (step >= total_steps) break;
      const auto t0 = Clock::now();
      const Batch b = data::make_batch(train.examples, indices, pad_id);
      const DropoutPlan dropout{true, tc.seed, static_cast<uint32_t>(step)};
      model.zero_grad();
      model.set_batch(b);
      model.forward(dropout);
      const float loss = to_host_scalar(model.loss(loss_options));
      model.backward(dropout);
      const double norm = std::sqrt(grad_sum_of_squares(model.param_grads()));
      const double lr = schedule.lr(step);
      if (std::isfinite(loss) && std::isfinite(norm)) {
        adamw.step(model.param_values(), model.param_grads(), static_cast<float>(lr),
                   clip_coefficient(norm, tc.max_grad_norm));
      } else {
        ++skipped;
        spdlog::warn("step {}: non-finite loss or gradient norm ({} / {}); update skipped", step,
                     loss, norm);
        if (skipped >= 10) throw Error("10 steps with non-finite loss or gradients; stopping");
      }
      ++step;
      const int64_t tokens = b.real_tokens();
      samples += b.size;
      real_tokens += tokens;
      train_seconds += seconds_since(t0);
      loss_window += loss;
      ++window_steps;
      window_samples += b.size;
      window_tokens += tokens;
      if (step % tc.log_every == 0 || step == total_steps) {
        const double secs = seconds_since(window_start);
        const double eta = (total_steps - step) * (train_seconds / step);
        spdlog::info(
            "step {}/{} epoch {} loss {:.4f} lr {:.2e} grad-norm {:.3f} | {:.1f} samples/s {:.0f} "
            "tokens/s | ETA {:.0f} s",
            step, total_steps, epoch, loss_window / window_steps, lr, norm, window_samples / secs,
            window_tokens / secs, eta);
        log_metrics({{"split", "train"},
                     {"step", step},
                     {"epoch", epoch},
                     {"loss", loss_window / window_steps},
                     {"lr", lr},
                     {"grad_norm", norm},
                     {"samples_per_s", window_samples / secs},
                     {"tokens_per_s", window_tokens / secs}});
        loss_window = 0;
        window_steps = window_samples = window_tokens = 0;
        window_start = Clock::now();
      }
      if (tc.eval_every > 0 && step % tc.eval_every == 0 && step < total_steps)
        run_eval(step, epoch);
    }
    if (step < total_steps || tc.eval_every == 0 || step % tc.eval_every != 0)
      run_eval(step, epoch);
  }

  nlohmann::json test_metrics;
  if (test) {
    test_metrics = evaluate(model, *test, tc.batch_size, pad_id, loss_options);
    spdlog::info("test: loss {:.4f} accuracy {:.4f} macro-F1 {:.4f}",
                 test_metrics["loss"].get<double>(), test_metrics["accuracy"].get<double>(),
                 test_metrics["macro_f1"].get<double>());
    nlohmann::json line = test_metrics;
    line["split"] = "test";
    log_metrics(line);
  }
  const std::string model_dir = (fs::path(cfg.output.dir) / "model").string();
  save_model(model, model_dir);
  copy_tokenizer_files(cfg.model.path, model_dir);

  nlohmann::json summary;
  summary["model"] = model_config.architecture();
  summary["source"] = cfg.model.path;
  summary["labels"] = labels.names;
  summary["initialised"] = report.initialised;
  summary["device"] = "cpu";
  summary["precision"] = "fp32";
  summary["threads"] = compute_threads();
  summary["steps"] = step;
  summary["skipped_steps"] = skipped;
  summary["train_samples_per_s"] = samples / train_seconds;
  summary["train_tokens_per_s"] = real_tokens / train_seconds;
  summary["train_seconds"] = train_seconds;
  summary["wall_seconds"] = seconds_since(t_start);
  summary["arena_bytes"] = arena.capacity();
  summary["plan_bytes"] = plan_json;
  summary["peak_host_bytes"] = device_bytes_peak(DeviceKind::CPU);
  summary["final_eval"] = last_eval;
  summary["best_eval"] = best_eval;
  summary["test"] = test_metrics;
  summary["model_dir"] = model_dir;
  io::write_json_atomic((fs::path(cfg.output.dir) / "summary.json").string(), summary);
  spdlog::info("done in {:.1f} s: model saved to {}", seconds_since(t_start), model_dir);
  return summary;
}

}  // namespace ftune
