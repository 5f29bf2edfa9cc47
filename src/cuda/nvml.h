// GPU utilisation, memory, power and temperature through NVML, loaded at run time with dlopen
// (libnvidia-ml.so.1, or the path in FTUNE_NVML_LIBRARY), so the build links nothing of NVML and a
// machine without the driver just reports "unavailable: <reason>". Plain C++, compiled in every
// build. NvmlSampler polls one device on a background thread during training and aggregates what
// the progress bar and summary.json show.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/device.h"

namespace ftune::cuda {

struct NvmlApi;  // the resolved entry points (nvml.cc)

// One reading of one device. Fields the device does not report (NVML_ERROR_NOT_SUPPORTED, or a
// library without that entry point) stay unset.
struct NvmlSample {
  double seconds = 0;                    // since the sampler started
  std::optional<unsigned> gpu_util;      // % of the last period a kernel was running
  std::optional<unsigned> memory_util;   // % of the last period device memory was read/written
  std::optional<uint64_t> memory_used;   // bytes (all processes)
  std::optional<uint64_t> memory_total;  // bytes
  std::optional<double> power_watts;
  std::optional<unsigned> temperature_c;  // GPU die
  std::optional<unsigned> sm_clock_mhz;
};

// The NVML library, loaded and initialised (nvmlInit_v2) for the lifetime of the object;
// nvmlShutdown and dlclose in the destructor. Never throws for a missing or failing library:
// available() is false and reason() says why.
class NvmlLibrary {
 public:
  // `path` empty: $FTUNE_NVML_LIBRARY, else "libnvidia-ml.so.1" (searched by the dynamic loader).
  static std::shared_ptr<NvmlLibrary> open(const std::string& path = "");
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  bool available() const { return api_ != nullptr; }
  const std::string& reason() const { return reason_; }  // why not available; empty when it is
  const std::string& path() const { return path_; }
  std::string driver_version() const;  // nvmlSystemGetDriverVersion; empty when unavailable

  // The NVML device of a CUDA device. CUDA and NVML may number devices differently (CUDA orders
  // fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA_VISIBLE_DEVICES renumbers), so the
  // PCI bus id ("0000:65:00.0", from cudaDeviceGetPCIBusId) is what identifies it; without one
  // the CUDA index is taken as NVML's. nullopt, with *why set, when NVML does not know it.
  struct DeviceHandle {
    void* handle = nullptr;  // nvmlDevice_t
    std::string name;        // nvmlDeviceGetName
    std::string pci_bus_id;  // as asked for (NVML form), empty when found by index
  };
  std::optional<DeviceHandle> device(const std::string& pci_bus_id, int cuda_index,
                                     std::string* why) const;
  // Reads every metric once; metrics that fail are left unset (never throws).
  NvmlSample sample(const DeviceHandle& device) const;
  // Max SM clock (nvmlDeviceGetMaxClockInfo), nullopt when not reported.
  std::optional<unsigned> max_sm_clock_mhz(const DeviceHandle& device) const;

 private:
  NvmlLibrary() = default;
  void* dl_ = nullptr;
  std::unique_ptr<NvmlApi> api_;
  std::string path_, reason_;
};

// "0000:65:00.0" / "00000000:65:00.0" / lower case -> NVML's "00000000:65:00.0"; empty when the
// text is not domain:bus:device.function in hex.
std::string nvml_bus_id(const std::string& pci_bus_id);

// What a sampler saw over a run.
struct NvmlStats {
  int64_t samples = 0;
  double gpu_util_mean = 0;  // over samples that reported it
  unsigned gpu_util_max = 0;
  int64_t gpu_util_samples = 0;
  uint64_t memory_used_max = 0, memory_total = 0;
  double power_watts_mean = 0;
  int64_t power_samples = 0;
  unsigned temperature_max_c = 0;
  int64_t temperature_samples = 0;
  unsigned sm_clock_mean_mhz = 0;
};

// Polls one device every `period_seconds` on its own thread between start() and stop().
// latest() and stats() may be called from any thread at any time.
class NvmlSampler {
 public:
  // For the CUDA device numbered `cuda_index` with bus id `pci_bus_id` (may be empty). When the
  // library is unavailable or the device unknown, the sampler is inert and reason() says why.
  // `cuda_name` names the device in json() when NVML cannot.
  NvmlSampler(std::shared_ptr<NvmlLibrary> library, const std::string& pci_bus_id, int cuda_index,
              double period_seconds = 0.5, std::string cuda_name = "");
  ~NvmlSampler();  // stops
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  bool available() const { return device_.has_value(); }
  const std::string& reason() const { return reason_; }
  const std::string& device_name() const;  // NVML's name, else cuda_name

  void start();  // no-op when unavailable or already running
  void stop();   // joins the thread; the statistics stay
  // Takes one sample now on the calling thread and adds it to the statistics (what the thread
  // does each period; tests call it directly for deterministic sequences).
  void sample_once();

  std::optional<NvmlSample> latest() const;
  NvmlStats stats() const;
  // summary.json's "gpu": name, nvml ("available" or "unavailable: <reason>"), and with samples
  // utilization_percent {mean, max}, memory_used_max_bytes, memory_total_bytes, power_watts_mean,
  // temperature_max_c, samples.
  nlohmann::json json() const;
  // The progress bar's field: "gpu 97% 41.2/79.6 GiB"; empty before the first sample or when
  // unavailable.
  std::string status_text() const;

 private:
  void loop();
  void record(const NvmlSample& s);

  std::shared_ptr<NvmlLibrary> library_;
  std::optional<NvmlLibrary::DeviceHandle> device_;
  std::string reason_, cuda_name_;
  double period_;
  double t0_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  std::thread thread_;
  std::optional<NvmlSample> latest_;
  NvmlStats stats_;
  double util_sum_ = 0, power_sum_ = 0, clock_sum_ = 0;
  int64_t clock_samples_ = 0;
};

// "gpu 97% 41.2/79.6 GiB" from one sample (parts the sample lacks are left out).
std::string format_gpu_status(const NvmlSample& s);

// The sampler of a training device (NVML's default library, period 0.5 s): a CUDA device is found
// in NVML by its PCI bus id (cuda::device_capabilities). nullptr for the CPU.
std::unique_ptr<NvmlSampler> device_sampler(Device device, double period_seconds = 0.5);

}  // namespace ftune::cuda
