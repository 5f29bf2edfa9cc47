// Step time and planned memory of full fine-tuning, LoRA and DoRA, each with and without gradient
// checkpointing, for an all-MiniLM-L6-v2-sized or BERT-base-sized classifier at batch 32 x 128
// (random weights and tokens, no padding, hidden / attention dropout 0.1 on; adapters on every
// encoder linear, r 8, alpha 16, adapter dropout 0). A step is forward, cross-entropy, backward
// and AdamW over the trainable parameters. The three setups' steps are interleaved (one of each in
// turn) so that load from other processes hits them alike; DoRA's overhead is the ratio of the
// DoRA and LoRA medians. Prints a markdown table.
//
//   adapter_bench --model minilm|bert-base [--batch 32] [--seq 128] [--threads 2] [--steps 5]
//                 [--warmup 1] [--checkpointing off|on|both]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>

#include "bench_models.h"
#include "core/memory.h"
#include "core/thread_pool.h"
#include "models/param_init.h"
#include "optim/adamw.h"

using namespace ftune;

namespace {

struct Setup {
  std::string name;
  std::unique_ptr<SequenceClassifier> clf;
  std::unique_ptr<AdamW> adamw;
  Arena arena;
  std::vector<double> ms, cpu_ms;  // wall time; CPU time of all threads of this process
  size_t act_bytes = 0, state_bytes = 0;
};

std::unique_ptr<Setup> make(const ModelSpec& config, const std::string& name, PeftMethod m,
                            GradientCheckpointing ckpt, int64_t batch, int64_t seq) {
  auto s = std::make_unique<Setup>();
  s->name = name;
  ClassifierOptions o;
  o.max_batch = batch;
  o.max_seq = seq;
  o.checkpointing = ckpt;
  o.adapters.method = m;
  o.adapters.r = 8;
  o.adapters.alpha = 16;
  o.adapters.target_modules = {"all-linear"};
  s->clf = std::make_unique<SequenceClassifier>(config, o);
  s->adamw = std::make_unique<AdamW>(s->clf->trainable_params(),
                                     AdamWOptions{2e-4f, 0.9f, 0.999f, 1e-8f, 0.01f});
  ArenaPlan plan;
  s->clf->add_to_plan(plan);
  s->adamw->add_to_plan(plan);
  for (const auto& [group, bytes] : plan.bytes_by_group()) {
    if (group == "act" || group == "gradact") s->act_bytes += bytes;
    if (group == "grad" || group == "adam") s->state_bytes += bytes;
  }
  s->arena = Arena(Device::cpu(), std::move(plan));
  s->clf->bind(s->arena);
  s->adamw->bind(s->arena);
  init_all_params_like_hf(*s->clf, 1);
  if (m != PeftMethod::None) {
    s->clf->init_adapters(2);
    // PEFT starts B at 0; give it values so the step does the work of a trained adapter.
    std::mt19937_64 rng(3);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    for (const ParamSpec& spec : s->clf->adapter_params().specs())
      if (spec.name.ends_with("lora_B.weight")) {
        HostTensor h(DType::F32, spec.shape);
        for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = nd(rng);
        copy(s->clf->param(spec.name), h.view());
      }
  }
  return s;
}

double cpu_now_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

void step(Setup& s, const Batch& b, int i) {
  const double c0 = cpu_now_ms();
  const auto t0 = std::chrono::steady_clock::now();
  const DropoutPlan dropout{true, 1234, static_cast<uint32_t>(i)};
  s.clf->set_batch(b);
  s.clf->zero_grad();
  s.clf->forward(dropout);
  s.clf->loss({});
  s.clf->backward(dropout);
  s.adamw->step(s.clf->trainable_values(), s.clf->trainable_grads(), 2e-4f);
  s.ms.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  s.cpu_ms.push_back(cpu_now_ms() - c0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftune adapter / checkpointing benchmark"};
  std::string model = "minilm";
  int64_t batch = 32, seq = 128;
  int threads = 2, steps = 5, warmup = 1;
  std::string checkpointing = "both";
  app.add_option("--model", model, "minilm or bert-base");
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--threads", threads, "compute threads");
  app.add_option("--steps", steps, "timed steps per setup");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--checkpointing", checkpointing, "off, on or both");
  CLI11_PARSE(app, argc, argv);
  try {
    set_compute_threads(threads);
    const ModelSpec config = bench::bench_model_config(model);
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

    fmt::print("{} {}x{}, {} threads, median of {} steps after {} warm-up\n\n", model, batch, seq,
               compute_threads(), steps, warmup);
    fmt::print(
        "| setup | checkpointing | trainable params | ms/step (median) | ms/step (min) | CPU "
        "ms/step "
        "(median) | arena MiB | activations MiB | grad+adam MiB "
        "|\n|---|---|---|---|---|---|---|---|"
        "---|\n");
    for (GradientCheckpointing ckpt : {GradientCheckpointing::Off, GradientCheckpointing::On}) {
      const char* ck = ckpt == GradientCheckpointing::On ? "on" : "off";
      if (checkpointing != "both" && checkpointing != ck) continue;
      auto row = [&](const Setup& s) {
        fmt::print("| {} | {} | {:.2f}M | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.1f} |\n",
                   s.name, ck, s.clf->trainable_params().total() / 1e6, median(s.ms),
                   *std::min_element(s.ms.begin(), s.ms.end()), median(s.cpu_ms),
                   s.arena.capacity() / double(1 << 20), s.act_bytes / double(1 << 20),
                   s.state_bytes / double(1 << 20));
      };
      // Round robin over the three setups: load from other processes hits all of them alike.
      std::vector<std::unique_ptr<Setup>> setups;
      setups.push_back(make(config, "full", PeftMethod::None, ckpt, batch, seq));
      setups.push_back(make(config, "lora", PeftMethod::Lora, ckpt, batch, seq));
      setups.push_back(make(config, "dora", PeftMethod::Dora, ckpt, batch, seq));
      for (int i = 0; i < warmup + steps; ++i)
        for (auto& s : setups) step(*s, b, i);
      for (auto& s : setups) {
        s->ms.erase(s->ms.begin(), s->ms.begin() + warmup);
        s->cpu_ms.erase(s->cpu_ms.begin(), s->cpu_ms.begin() + warmup);
        row(*s);
      }
      const Setup &lora = *setups[1], &dora = *setups[2];
      const auto least = [](const std::vector<double>& v) {
        return *std::min_element(v.begin(), v.end());
      };
      fmt::print("| DoRA overhead over LoRA | {} | | {:+.1f}% | {:+.1f}% | {:+.1f}% | | | |\n", ck,
                 100.0 * (median(dora.ms) / median(lora.ms) - 1.0),
                 100.0 * (least(dora.ms) / least(lora.ms) - 1.0),
                 100.0 * (median(dora.cpu_ms) / median(lora.cpu_ms) - 1.0));
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "adapter_bench: {}\n", e.what());
    return 2;
  }
  return 0;
}
