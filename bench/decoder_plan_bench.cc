// The memory plan of decoder LoRA fine-tuning on a GPU (issue 18): for each config.json as HF ships
// it (bench/data/), LoRA on every linear layer, the frozen base in bf16 (stored only in bf16),
// bf16 compute and gradient checkpointing at one sequence length: the planned bytes by category at
// micro-batch 1, and the largest micro-batch (rows of `seq` tokens) that fits each memory size,
// with and without checkpointing. Planning touches no memory: it runs anywhere.
// --causal-lm (issue 40) plans the model as a causal LM (its lm_head and the fused chunked loss,
// ops/lm_head_loss.h) and prints, next to the plan, what the (tokens x vocabulary) fp32 logits and
// their gradient would take if they were materialised (they are not planned: the loss never forms
// them).
//
//   decoder_plan_bench --config bench/data/llama-3.1-8b/config.json [--config ...] [--seq 512]
//                      [--r 16] [--memory 24GiB,32GiB,80GiB] [--fraction 0.95] [--json]
//                      [--causal-lm]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "train/memory_planner.h"

using namespace ftune;

int main(int argc, char** argv) {
  CLI::App app{"ftune decoder memory-plan benchmark"};
  std::vector<std::string> configs;
  std::vector<std::string> memories = {"24GiB", "32GiB", "80GiB"};
  int64_t seq = 512, r = 16;
  double fraction = 0.95;
  bool json = false, causal_lm = false;
  app.add_option("--config", configs, "config.json of a decoder model")->required();
  app.add_option("--seq", seq, "tokens per row");
  app.add_option("--r", r, "LoRA rank (alpha = 2 r)");
  app.add_option("--memory", memories, "device memory sizes")->delimiter(',');
  app.add_option("--fraction", fraction, "share of the memory the plan may use");
  app.add_flag("--json", json, "one JSON object per model");
  app.add_flag("--causal-lm", causal_lm, "plan the causal LM (lm_head, fused loss) instead");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& path : configs) {
      PlanTarget t;
      const ModelSpec spec = model_spec_from_json(io::read_json_file(path), path);
      t.model = causal_lm ? spec.as_causal_lm() : spec.with_num_labels(2);
      t.adapters.method = PeftMethod::Lora;
      t.adapters.r = r;
      t.adapters.alpha = 2.0f * static_cast<float>(r);
      t.adapters.target_modules = {"all-linear"};
      t.max_seq = seq;
      t.device = Device{DeviceKind::CUDA, 0};
      t.precision = DType::BF16;
      const MemoryPlan one = plan_memory(t, 1, GradientCheckpointing::On);
      nlohmann::json out = {{"config", path},
                            {"model", t.model.info().architecture},
                            {"seq", seq},
                            {"lora_r", r},
                            {"plan_at_1_bytes", one.total}};
      if (!json) {
        std::cout << fmt::format("{} ({} layers, hidden {}), LoRA r={} all-linear, bf16 base and "
                                 "compute, checkpointing, {} tokens\n",
                                 path, t.model.info().num_layers, t.model.info().hidden_size, r,
                                 seq);
        std::cout << fmt::format("  {:<22} {:>12}\n", "category (micro-batch 1)", "bytes");
      }
      for (const MemoryCategory& c : one.categories) {
        out["categories"][c.name] = c.bytes;
        if (!json) std::cout << fmt::format("  {:<22} {:>12}\n", c.name, format_bytes(c.bytes));
      }
      if (!json) std::cout << fmt::format("  {:<22} {:>12}\n", "total", format_bytes(one.total));
      if (causal_lm) {
        // What materialised fp32 logits and their gradient would add per row of `seq` tokens.
        const auto logits = static_cast<size_t>(2 * 4 * seq * t.model.info().vocab_size);
        out["materialised_logits_bytes_per_row"] = logits;
        if (!json)
          std::cout << fmt::format("  {:<22} {:>12} per row (not planned: the fused loss keeps "
                                   "one block)\n",
                                   "logits + dlogits fp32", format_bytes(logits));
      }
      for (const std::string& m : memories) {
        const size_t budget =
            static_cast<size_t>(fraction * static_cast<double>(parse_bytes(m, "--memory")));
        const int64_t on = largest_micro_batch(t, GradientCheckpointing::On, budget, 1 << 12);
        const int64_t off = largest_micro_batch(t, GradientCheckpointing::Off, budget, 1 << 12);
        out["largest_micro_batch"][m] = {{"checkpointing", on}, {"without", off}};
        if (!json)
          std::cout << fmt::format("  {:>6} (budget {}): largest micro-batch {} x {} with "
                                   "checkpointing, {} without\n",
                                   m, format_bytes(budget), on, seq, off);
      }
      if (json) std::cout << out.dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "decoder_plan_bench: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
