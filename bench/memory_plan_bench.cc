// The memory planner's answers for a model at several sequence lengths: the largest micro-batch
// that fits a budget (with and without gradient checkpointing), the planned peak of that batch and
// of a fixed batch of 32, and how long planning takes. bench/memory_plan_bench.sh times training
// steps at the planned batch next to batch 32 with train_step_bench.
//
//   memory_plan_bench --model bert-base|minilm|deberta-v3-base|deberta-v3-large [--seq 128,256,512]
//                     [--memory 24GiB ...] [--at 1,2] [--precision fp32|bf16|f16] [--lora R]
//                     [--device cpu|cuda] [--json]
//   (without --memory: this machine's available memory; budget = 0.95 of it; --at: also the
//   planned bytes at these micro-batch sizes, to set next to a measured peak; --device: whose
//   buffers to plan, the CPU's or a GPU's, which differ where an op's kernels do: DeBERTa's
//   attention saves P on the CPU, lse and O on CUDA; no GPU is needed to plan for one)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench_models.h"
#include "core/memory.h"
#include "train/memory_planner.h"

using namespace ftune;

int main(int argc, char** argv) {
  CLI::App app{"ftune memory planner benchmark"};
  std::string model = "bert-base";
  std::vector<int64_t> seqs = {128, 256, 512};
  std::vector<std::string> memories;
  double fraction = 0.95;
  bool json = false;
  std::vector<int64_t> at;
  std::string precision = "fp32";
  int64_t lora = 0;
  std::string device = "cpu";
  app.add_option("--model", model, "minilm, bert-base, deberta-v3-base or deberta-v3-large");
  app.add_option("--at", at, "also plan these micro-batch sizes")->delimiter(',');
  app.add_option("--seq", seqs, "sequence lengths")->delimiter(',');
  app.add_option("--memory", memories, "device memory sizes to plan for (default: this machine)");
  app.add_option("--fraction", fraction, "share of the memory the plan may use");
  app.add_option("--precision", precision, "training.precision: fp32, bf16 or f16")
      ->check(CLI::IsMember({"fp32", "bf16", "f16"}));
  app.add_option("--lora", lora, "LoRA rank on every linear layer (0: full fine-tuning)");
  app.add_option("--device", device, "plan the buffers of cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--json", json, "one JSON line per row");
  CLI11_PARSE(app, argc, argv);
  try {
    const ModelSpec config = bench::bench_model_config(model);
    std::vector<std::pair<std::string, size_t>> devices;
    if (memories.empty()) {
      const DeviceMemoryInfo info = device_memory_info(Device::cpu());
      devices.push_back({"this machine (" + info.source + ")", info.available});
    }
    for (const std::string& m : memories) devices.push_back({m, parse_bytes(m, "--memory")});
    if (!json)
      std::cout << fmt::format("{:<34} {:>5} {:>9} {:>9} {:>12} {:>12} {:>9}\n", "memory", "seq",
                               "max batch", "with ckpt", "plan at max", "plan at 32", "plan ms");
    for (const auto& [name, memory] : devices)
      for (int64_t seq : seqs) {
        PlanTarget target{config, {}, seq, 0, device == "cuda" ? Device::cuda(0) : Device::cpu()};
        target.precision = precision == "bf16" ? DType::BF16
                           : precision == "f16" ? DType::F16
                                                : DType::F32;
        if (lora > 0) {
          target.adapters.method = PeftMethod::Lora;
          target.adapters.r = lora;
          target.adapters.alpha = 2.0 * static_cast<double>(lora);
          target.adapters.target_modules = {"all-linear"};
        }
        const size_t budget = static_cast<size_t>(fraction * static_cast<double>(memory));
        const auto t0 = std::chrono::steady_clock::now();
        const int64_t off = largest_micro_batch(target, GradientCheckpointing::Off, budget, 1 << 20);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        const int64_t on = largest_micro_batch(target, GradientCheckpointing::On, budget, 1 << 20);
        const size_t at_max =
            off > 0 ? plan_memory(target, off, GradientCheckpointing::Off).total : 0;
        const size_t at_32 = plan_memory(target, 32, GradientCheckpointing::Off).total;
        nlohmann::json at_rows = nlohmann::json::object();
        for (int64_t rows : at)
          at_rows[std::to_string(rows)] = plan_memory(target, rows, GradientCheckpointing::Off).total;
        if (json) {
          std::cout << nlohmann::json{{"model", model},         {"memory", name},
                                      {"precision", precision}, {"lora", lora}, {"device", device},
                                      {"planned_bytes_at", at_rows},
                                      {"memory_bytes", memory}, {"budget_bytes", budget},
                                      {"seq", seq},             {"largest_micro_batch", off},
                                      {"largest_with_checkpointing", on},
                                      {"planned_bytes_at_largest", at_max},
                                      {"planned_bytes_at_32", at_32},
                                      {"batch_32_fits", at_32 <= budget},
                                      {"search_ms", ms}}
                           .dump()
                    << "\n";
        } else {
          std::cout << fmt::format("{:<34} {:>5} {:>9} {:>9} {:>12} {:>12} {:>9.2f}\n", name, seq,
                                   off, on, format_bytes(at_max),
                                   format_bytes(at_32) + (at_32 <= budget ? "" : " (!)"), ms);
          for (int64_t rows : at)
            std::cout << fmt::format("{:<34} {:>5} plan at {} rows: {}\n", "", seq, rows,
                                     format_bytes(at_rows[std::to_string(rows)].get<size_t>()));
        }
      }
    if (!json) std::cout << "(!): a fixed batch of 32 does not fit the budget\n";
  } catch (const std::exception& e) {
    std::cerr << "memory_plan_bench: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
