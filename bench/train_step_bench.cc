// Times a full training step — forward, cross-entropy, backward, gradient clipping and AdamW — of
// an all-MiniLM-L6-v2-sized or BERT-base-sized classifier at batch 32 x 128 tokens (random
// weights and tokens, no padding, dropout 0.1 on, as in training). bench/compare_train_step.sh
// runs it next to the PyTorch peer (bench/torch_train_step.py) with the same thread count. With
// --lora R: LoRA r=R (alpha 2R, dropout --lora-dropout, 0.05 by default) on every linear layer,
// AdamW over what it trains (bench/compare_decoder_step.sh: the ~100M Llama against PyTorch + PEFT).
//
//   train_step_bench --model minilm|bert-base|deberta-v3-base|modernbert-base|llama-100m
//                    [--batch 32] [--seq 128] [--lora R] [--lora-dropout 0.05] [--threads N]
//                    [--steps 10] [--warmup 2]
//                    [--whole-last-layer] [--json]
// --whole-last-layer: every token through the last layer (ClassifierOptions::first_token_head
// off), to time what the BERT family's first-token form saves.
// FTUNE_PROFILE_OPS=1 prints step FTUNE_PROFILE_STEP's per-op table (core/op_profile.h) on stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <random>

#include "bench_models.h"
#include "core/blas_buffers.h"
#include "core/memory.h"
#include "core/op_profile.h"
#include "core/thread_pool.h"
#include "models/param_init.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

using namespace ftune;

int main(int argc, char** argv) {
  ftune::reexec_with_blas_settings(argv);  // OpenBLAS as `ftune` runs it (core/blas_buffers.h)
  CLI::App app{"ftune training-step benchmark"};
  std::string model = "minilm";
  int64_t batch = 32, seq = 128;
  int threads = 0, steps = 10, warmup = 2, lora = 0;
  bool json = false, whole_last_layer = false;
  float lora_dropout = 0.05f;
  app.add_option("--model", model,
                 "minilm, bert-base, deberta-v3-base, modernbert-base or llama-100m");
  app.add_option("--lora", lora, "LoRA rank on every linear layer (0: full fine-tuning)");
  app.add_option("--lora-dropout", lora_dropout, "the adapters' dropout rate")
      ->check(CLI::Range(0.0f, 0.99f));
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--threads", threads, "compute threads (default: all cores)");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_flag("--whole-last-layer", whole_last_layer,
               "every token through the last layer (no first-token form)");
  app.add_flag("--json", json, "print one JSON line");
  CLI11_PARSE(app, argc, argv);

  try {
    set_compute_threads(threads);
    const ModelSpec config = bench::bench_model_config(model);
    ClassifierOptions options{batch, seq, true};
    options.first_token_head = !whole_last_layer;
    if (lora > 0) {
      options.adapters.method = PeftMethod::Lora;
      options.adapters.r = lora;
      options.adapters.alpha = 2.0f * static_cast<float>(lora);
      options.adapters.dropout = lora_dropout;
      options.adapters.target_modules = {"all-linear"};
    }
    SequenceClassifier clf(config, options);
    AdamW adamw(clf.trainable_params(), AdamWOptions{2e-5f, 0.9f, 0.999f, 1e-8f, 0.01f});
    ArenaPlan plan;
    clf.add_to_plan(plan);
    adamw.add_to_plan(plan);
    Arena arena(Device::cpu(), std::move(plan));
    clf.bind(arena);
    adamw.bind(arena);
    init_all_params_like_hf(clf, 1);
    if (lora > 0) clf.init_adapters(2);

    std::mt19937_64 rng(7);
    Batch b;
    b.size = batch;
    b.seq_len = seq;
    for (int64_t i = 0; i < batch * seq; ++i) {
      b.input_ids.push_back(static_cast<int32_t>(rng() % config.info().vocab_size));
      b.token_type_ids.push_back(i % seq < seq / 2 ? 0 : 1);
      b.attention_mask.push_back(1);
    }
    for (int64_t i = 0; i < batch; ++i) b.labels.push_back(static_cast<int32_t>(rng() % 2));

    // Wall time and the process's CPU time (user + sys, all threads) per step: on a machine shared
    // with other work the CPU time is the steadier number.
    const auto cpu_ms = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    };
    std::vector<double> ms, cpu;
    for (int s = 0; s < warmup + steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_ms();
      // FTUNE_PROFILE_OPS=1: the per-op table of step FTUNE_PROFILE_STEP (default 3) on stderr.
      profile::StepRecorder recorder(s + 1, warmup + steps, Device::cpu());
      const DropoutPlan dropout{true, 1234, static_cast<uint32_t>(s)};
      clf.set_batch(b);
      clf.zero_grad();
      clf.forward(dropout);
      clf.loss({});
      clf.backward(dropout);
      const double norm = std::sqrt(grad_sum_of_squares(clf.trainable_grads()));
      adamw.step(clf.trainable_values(), clf.trainable_grads(), 2e-5f, clip_coefficient(norm, 1.0));
      const double t =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (recorder.active()) fmt::print(stderr, "{}\n", recorder.finish().table(60));
      if (s >= warmup) ms.push_back(t), cpu.push_back(cpu_ms() - c0);
    }
    std::sort(ms.begin(), ms.end());
    std::sort(cpu.begin(), cpu.end());
    const double median = ms[ms.size() / 2];
    const double cpu_median = cpu[cpu.size() / 2];
    const double samples = batch * 1000.0 / median;
    if (json) {
      fmt::print(
          "{{\"impl\": \"ftune\", \"model\": \"{}\", \"batch\": {}, \"seq\": {}, \"threads\": {}, "
          "\"lora_r\": {}, \"first_token_head\": {}, \"trained_m\": {:.2f}, \"ms_per_step\": {:.1f}, \"min_ms\": {:.1f}, "
          "\"cpu_ms_per_step\": {:.1f}, \"samples_per_s\": {:.2f}, \"arena_mib\": {:.1f}}}\n",
          model, batch, seq, compute_threads(), lora, !whole_last_layer, clf.trainable_params().total() / 1e6, median,
          ms.front(), cpu_median, samples, arena.capacity() / double(1 << 20));
    } else {
      fmt::print(
          "ftune {} {}x{} threads={} params={:.1f}M arena={:.0f} MiB: {:.1f} ms/step (min {:.1f}), "
          "CPU {:.1f} ms/step, {:.2f} samples/s\n",
          model, batch, seq, compute_threads(), clf.params().total() / 1e6,
          arena.capacity() / double(1 << 20), median, ms.front(), cpu_median, samples);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "train_step_bench: {}\n", e.what());
    return 2;
  }
  return 0;
}
