// `ftune doctor [--config FILE.yaml] [section.key=value ...]`: what this build and machine can do
// — backends and libraries compiled in (cuBLASLt, cuDNN and its flash attention, NVML loaded at
// run time), each CUDA device's capabilities and live NVML reading — and which optimisations a
// training run gets, with the reason for each (cli/doctor_report.h). With --config the
// optimisations are those of that configuration on its training.device; without, of the defaults
// on the first CUDA device (or the CPU when there is none).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/doctor_report.h"
#include "core/device.h"
#include "core/error.h"
#include "core/float_env.h"
#include "core/thread_pool.h"
#include "cuda/cuda_libraries.h"
#include "cuda/nvml.h"
#include "ops/cpu_gemm_library.h"
#include "ops/cpu_matmul.h"
#include "train/memory_planner.h"
#include "train/precision.h"

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#endif

extern "C" char* openblas_get_config();

namespace ftune::cli {
namespace {

struct DoctorArgs {
  std::string config;
  std::vector<std::string> overrides;
};

[[maybe_unused]] std::string cuda_version_text(int v) {  // 13000 -> "13.0"
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

// Prints cuda:`index` (capabilities and an NVML reading); fills `facts` when it is the device
// the optimisations are for.
void print_cuda_device(int index, const cuda::NvmlLibrary& nvml, DoctorFacts* facts) {
#ifdef FTUNE_WITH_CUDA
  const cuda::DeviceCapabilities c = cuda::device_capabilities(Device::cuda(index));
  fmt::print("cuda:{}: {}\n", index, c.name);
  fmt::print("  sm_{}{}, {} SMs, {}, SM clock {:.2f} GHz, PCI {}\n", c.major, c.minor, c.sm_count,
             format_bytes(c.total_bytes), c.clock_khz / 1e6, c.pci_bus_id);
  fmt::print("  tensor cores: bf16 {}, TF32 {}, fp16 {}; CUDA driver {}, runtime {}\n",
             c.bf16 ? "yes" : "no", c.tf32 ? "yes" : "no", c.fp16 ? "yes" : "no",
             cuda_version_text(c.driver_version), cuda_version_text(c.runtime_version));
  std::string why;
  const auto handle = nvml.device(c.pci_bus_id, index, &why);
  if (handle) {
    const cuda::NvmlSample s = nvml.sample(*handle);
    std::string line = fmt::format("  NVML: {}", handle->name);
    if (s.gpu_util) line += fmt::format(", {}% busy", *s.gpu_util);
    if (s.memory_used && s.memory_total)
      line += fmt::format(", {} of {} used", format_bytes(*s.memory_used),
                          format_bytes(*s.memory_total));
    if (s.power_watts) line += fmt::format(", {:.0f} W", *s.power_watts);
    if (s.temperature_c) line += fmt::format(", {} C", *s.temperature_c);
    const auto max_clock = nvml.max_sm_clock_mhz(*handle);
    if (s.sm_clock_mhz)
      line += fmt::format(", SM clock {}{} MHz", *s.sm_clock_mhz,
                          max_clock ? fmt::format("/{}", *max_clock) : "");
    fmt::print("{}\n", line);
  } else {
    fmt::print("  NVML: unavailable: {}\n", why);
  }
  if (facts && facts->device == Device::cuda(index)) {
    facts->device_visible = true;
    facts->sm_major = c.major;
    facts->sm_minor = c.minor;
    facts->bf16 = c.bf16;
    facts->tf32 = c.tf32;
    facts->fp16 = c.fp16;
    facts->nvml_available = handle.has_value();
    facts->nvml_reason = handle ? "" : why;
  }
#else
  (void)index, (void)nvml, (void)facts;
#endif
}

void run_doctor(const DoctorArgs& a) {
  // The configuration first: a bad key fails before anything is printed.
  std::optional<TrainConfig> cfg;
  if (!a.config.empty()) cfg = TrainConfig::load(a.config, a.overrides);

  fmt::print("ftune 0.1.0\n");
  fmt::print("cpu: {} compute threads, flush-to-zero {}\n", compute_threads(),
             flush_to_zero_enabled() ? "on" : "off");
  fmt::print("blas: {}\n", openblas_get_config());
  fmt::print("cpu gemm: {}\n", cpu::gemm_library_description());
  fmt::print("cpu scoring: {}\n", cpu::matmul_description());
  fmt::print("cuda backend: {}\n", cuda_built() ? "built" : "not built (FTUNE_CUDA=OFF)");
  const cuda::LibraryStatus cublaslt = cuda::cublaslt_library();
  fmt::print("cuBLASLt: {}\n", cublaslt.available
                                   ? fmt::format("{} ({})", cublaslt.version, cublaslt.detail)
                                   : cublaslt.detail);
  const cuda::LibraryStatus cudnn = cuda::cudnn_library();
  fmt::print("cuDNN: {}\n", cudnn.available ? fmt::format("{} ({})", cudnn.version, cudnn.detail)
                                            : "not found: " + cudnn.detail);
  fmt::print("cuDNN flash attention: {}\n",
             cuda::cudnn_sdpa_compiled() ? "compiled in (" + cuda::cudnn_sdpa_build_note() + ")"
                                         : "not compiled: " + cuda::cudnn_sdpa_build_note());
  const std::shared_ptr<cuda::NvmlLibrary> nvml = cuda::NvmlLibrary::open();
  if (nvml->available())
    fmt::print("NVML: available (driver {}, {})\n", nvml->driver_version(), nvml->path());
  else
    fmt::print("NVML: unavailable: {}\n", nvml->reason());

  DoctorFacts facts;
  std::string device_source;
  const int n = cuda_device_count();
  if (cfg) {
    facts.device = parse_device(cfg->training.device);
    device_source = fmt::format("training.device of {}", a.config);
  } else if (n > 0) {
    facts.device = Device::cuda(0);
    device_source = "the first CUDA device; default configuration";
  } else {
    device_source = "no CUDA device, so the CPU; default configuration";
  }
  facts.cudnn_sdpa_compiled = cuda::cudnn_sdpa_compiled();
  facts.cudnn_sdpa_note = cuda::cudnn_sdpa_build_note();
  facts.cudnn_runtime = cudnn.available;
  facts.cudnn_detail = cudnn.available ? cudnn.version : cudnn.detail;
  facts.nvml_reason = nvml->available() ? "" : nvml->reason();

  if (!cuda_built())
    fmt::print("cuda devices: none (CUDA backend not built)\n");
  else if (n == 0)
    fmt::print("cuda devices: none visible (no CUDA device: the driver reports none)\n");
  for (int i = 0; i < n; ++i) print_cuda_device(i, *nvml, &facts);

  const TrainConfig defaults;
  const TrainConfig& config = cfg ? *cfg : defaults;
  if (cfg) {
    fmt::print("\nconfig {}:\n", a.config);
    std::string device_problem;
    try {
      training_device(*cfg);
    } catch (const InputError& e) {
      device_problem = e.what();
    }
    fmt::print("  device: {}{}\n", device_name(facts.device),
               device_problem.empty() ? "" : " — not usable here: " + device_problem);
    std::string precision = "unknown (the device is not visible here)";
    if (facts.device.is_cpu() || facts.device_visible) {
      try {
        const ResolvedPrecision r = resolve_precision(config.training.precision, facts.device,
                                                      facts.bf16);
        precision = fmt::format("{} ({})", precision_name(r.precision), r.reason);
      } catch (const InputError& e) {
        precision = std::string("error: ") + e.what();
      }
    }
    fmt::print("  precision: {}\n", precision);
    fmt::print("  batch: {}, effective batch {}, gradient checkpointing {}\n",
               config.training.batch_size == 0
                   ? std::string("micro-batch auto (memory plan)")
                   : fmt::format("micro-batch {}", config.training.batch_size),
               config.training.effective_batch_size,
               gradient_checkpointing_name(config.training.gradient_checkpointing));
    fmt::print("  batch plan: `ftune plan --config {}` (reads and tokenizes the data)\n", a.config);
  }

  fmt::print("\noptimisations on {} ({}):\n", device_name(facts.device), device_source);
  fmt::print("{}", format_optimisations(optimisation_states(facts, config)));
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto a = std::make_shared<DoctorArgs>();
  CLI::App* cmd =
      app.add_subcommand("doctor",
                         "Print the devices, libraries and capabilities ftune sees and which "
                         "optimisations a training run gets, and why");
  cmd->add_option("--config", a->config,
                  "YAML training configuration: report the optimisations of this run");
  cmd->add_option("overrides", a->overrides, "section.key=value overrides of the configuration");
  cmd->callback([a] {
    if (a->config.empty() && !a->overrides.empty())
      throw InputError(
          fmt::format("ftune doctor: overrides ('{}') need --config", a->overrides.front()));
    run_doctor(*a);
  });
}

}  // namespace ftune::cli
