// NVML through dlopen (see nvml.h). The prototypes and structs below are NVML's C ABI as declared
// in nvml.h of the CUDA toolkit (stable across driver versions for these entry points); they are
// written out here so that the build needs neither the header nor the library.
#include "cuda/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#ifdef FTUNE_WITH_CUDA
#include "cuda/cuda_device.h"
#endif

namespace ftune::cuda {
namespace {

// nvmlReturn_t values we name; anything else is reported through nvmlErrorString.
constexpr int kNvmlSuccess = 0;
constexpr unsigned kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr unsigned kClockSm = 1;         // NVML_CLOCK_SM
constexpr unsigned kNameLength = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kVersionLength = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

struct nvmlUtilization_t {
  unsigned int gpu;     // %
  unsigned int memory;  // %
};
struct nvmlMemory_t {
  unsigned long long total, free, used;  // bytes
};
using nvmlDevice_t = void*;

}  // namespace

struct NvmlApi {
  // Required: without these the library is unusable.
  int (*init)();
  int (*shutdown)();
  const char* (*error_string)(int);
  int (*driver_version)(char*, unsigned);
  int (*handle_by_index)(unsigned, nvmlDevice_t*);
  int (*handle_by_bus_id)(const char*, nvmlDevice_t*);
  int (*name)(nvmlDevice_t, char*, unsigned);
  int (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  int (*memory)(nvmlDevice_t, nvmlMemory_t*);
  // Optional: a metric whose entry point is missing is just not reported.
  int (*power)(nvmlDevice_t, unsigned*) = nullptr;  // milliwatts
  int (*temperature)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  int (*clock)(nvmlDevice_t, unsigned, unsigned*) = nullptr;      // MHz
  int (*max_clock)(nvmlDevice_t, unsigned, unsigned*) = nullptr;  // MHz

  std::string error(int code) const {
    const char* s = error_string ? error_string(code) : nullptr;
    return s ? fmt::format("{} (NVML error {})", s, code) : fmt::format("NVML error {}", code);
  }
};

namespace {

template <typename Fn>
bool resolve(void* dl, const char* symbol, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(dl, symbol));
  if (!*out && missing && missing->empty()) *missing = symbol;
  return *out != nullptr;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string nvml_bus_id(const std::string& text) {
  // Hex digits, ':' and '.' only (sscanf's %x alone would take "0x" prefixes and signs).
  for (const char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return "";
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &consumed) !=
          4 ||
      consumed != static_cast<int>(text.size()))
    return "";
  return fmt::format("{:08X}:{:02X}:{:02X}.{:X}", domain, bus, device, function);
}

std::shared_ptr<NvmlLibrary> NvmlLibrary::open(const std::string& path) {
  std::shared_ptr<NvmlLibrary> lib(new NvmlLibrary());
  const char* env = std::getenv("FTUNE_NVML_LIBRARY");
  lib->path_ = !path.empty() ? path : env && *env ? env : "libnvidia-ml.so.1";
  lib->dl_ = dlopen(lib->path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->dl_) {
    const char* e = dlerror();
    lib->reason_ = e ? e : lib->path_ + ": cannot be loaded";
    return lib;
  }
  auto api = std::make_unique<NvmlApi>();
  std::string missing;
  void* dl = lib->dl_;
  resolve(dl, "nvmlInit_v2", &api->init, &missing);
  resolve(dl, "nvmlShutdown", &api->shutdown, &missing);
  resolve(dl, "nvmlErrorString", &api->error_string, &missing);
  resolve(dl, "nvmlSystemGetDriverVersion", &api->driver_version, &missing);
  resolve(dl, "nvmlDeviceGetHandleByIndex_v2", &api->handle_by_index, &missing);
  resolve(dl, "nvmlDeviceGetHandleByPciBusId_v2", &api->handle_by_bus_id, &missing);
  resolve(dl, "nvmlDeviceGetName", &api->name, &missing);
  resolve(dl, "nvmlDeviceGetUtilizationRates", &api->utilization, &missing);
  resolve(dl, "nvmlDeviceGetMemoryInfo", &api->memory, &missing);
  resolve(dl, "nvmlDeviceGetPowerUsage", &api->power, nullptr);
  resolve(dl, "nvmlDeviceGetTemperature", &api->temperature, nullptr);
  resolve(dl, "nvmlDeviceGetClockInfo", &api->clock, nullptr);
  resolve(dl, "nvmlDeviceGetMaxClockInfo", &api->max_clock, nullptr);
  if (!missing.empty()) {
    lib->reason_ = fmt::format("{}: no symbol {} (not an NVML library?)", lib->path_, missing);
    return lib;  // the destructor closes dl_
  }
  const int rc = api->init();
  if (rc != kNvmlSuccess) {
    lib->reason_ = fmt::format("nvmlInit_v2 failed: {}", api->error(rc));
    return lib;
  }
  lib->api_ = std::move(api);
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (api_) api_->shutdown();
  if (dl_) dlclose(dl_);
}

std::string NvmlLibrary::driver_version() const {
  if (!api_) return "";
  char text[kVersionLength] = {};
  if (api_->driver_version(text, kVersionLength) != kNvmlSuccess) return "";
  return text;
}

std::optional<NvmlLibrary::DeviceHandle> NvmlLibrary::device(const std::string& pci_bus_id,
                                                             int cuda_index,
                                                             std::string* why) const {
  if (!api_) {
    if (why) *why = reason_;
    return std::nullopt;
  }
  DeviceHandle d;
  int rc;
  if (!pci_bus_id.empty()) {
    d.pci_bus_id = nvml_bus_id(pci_bus_id);
    if (d.pci_bus_id.empty()) {
      if (why)
        *why = fmt::format("'{}' is not a PCI bus id (domain:bus:device.function)", pci_bus_id);
      return std::nullopt;
    }
    rc = api_->handle_by_bus_id(d.pci_bus_id.c_str(), &d.handle);
    if (rc != kNvmlSuccess) {
      if (why)
        *why = fmt::format("no NVML device at PCI bus id {}: {}", d.pci_bus_id, api_->error(rc));
      return std::nullopt;
    }
  } else {
    rc = cuda_index >= 0 ? api_->handle_by_index(static_cast<unsigned>(cuda_index), &d.handle) : -1;
    if (rc != kNvmlSuccess) {
      if (why) *why = fmt::format("no NVML device with index {}: {}", cuda_index, api_->error(rc));
      return std::nullopt;
    }
  }
  char name[kNameLength] = {};
  if (api_->name(d.handle, name, kNameLength) == kNvmlSuccess) d.name = name;
  return d;
}

NvmlSample NvmlLibrary::sample(const DeviceHandle& device) const {
  NvmlSample s;
  if (!api_) return s;
  nvmlUtilization_t u{};
  if (api_->utilization(device.handle, &u) == kNvmlSuccess) {
    s.gpu_util = u.gpu;
    s.memory_util = u.memory;
  }
  nvmlMemory_t m{};
  if (api_->memory(device.handle, &m) == kNvmlSuccess) {
    s.memory_used = m.used;
    s.memory_total = m.total;
  }
  unsigned v = 0;
  if (api_->power && api_->power(device.handle, &v) == kNvmlSuccess) s.power_watts = v / 1000.0;
  if (api_->temperature && api_->temperature(device.handle, kTemperatureGpu, &v) == kNvmlSuccess)
    s.temperature_c = v;
  if (api_->clock && api_->clock(device.handle, kClockSm, &v) == kNvmlSuccess) s.sm_clock_mhz = v;
  return s;
}

std::optional<unsigned> NvmlLibrary::max_sm_clock_mhz(const DeviceHandle& device) const {
  unsigned v = 0;
  if (api_ && api_->max_clock && api_->max_clock(device.handle, kClockSm, &v) == kNvmlSuccess)
    return v;
  return std::nullopt;
}

NvmlSampler::NvmlSampler(std::shared_ptr<NvmlLibrary> library, const std::string& pci_bus_id,
                         int cuda_index, double period_seconds, std::string cuda_name)
    : library_(std::move(library)),
      cuda_name_(std::move(cuda_name)),
      period_(period_seconds),
      t0_(now_seconds()) {
  if (!library_) {
    reason_ = "NVML not loaded";
    return;
  }
  device_ = library_->device(pci_bus_id, cuda_index, &reason_);
}

NvmlSampler::~NvmlSampler() {
  stop();
}

const std::string& NvmlSampler::device_name() const {
  return device_ && !device_->name.empty() ? device_->name : cuda_name_;
}

void NvmlSampler::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!device_ || thread_.joinable()) return;
  stop_requested_ = false;
  thread_ = std::thread([this] { loop(); });
}

void NvmlSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_requested_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NvmlSampler::loop() {
  const auto period = std::chrono::duration<double>(period_);
  for (;;) {
    sample_once();
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, period, [this] { return stop_requested_; })) return;
  }
}

void NvmlSampler::sample_once() {
  if (!device_) return;
  NvmlSample s = library_->sample(*device_);  // outside the lock: NVML calls take ~ms
  s.seconds = now_seconds() - t0_;
  record(s);
}

void NvmlSampler::record(const NvmlSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = s;
  NvmlStats& st = stats_;
  ++st.samples;
  if (s.gpu_util) {
    util_sum_ += *s.gpu_util;
    ++st.gpu_util_samples;
    st.gpu_util_mean = util_sum_ / double(st.gpu_util_samples);
    st.gpu_util_max = std::max(st.gpu_util_max, *s.gpu_util);
  }
  if (s.memory_used) st.memory_used_max = std::max(st.memory_used_max, *s.memory_used);
  if (s.memory_total) st.memory_total = *s.memory_total;
  if (s.power_watts) {
    power_sum_ += *s.power_watts;
    ++st.power_samples;
    st.power_watts_mean = power_sum_ / double(st.power_samples);
  }
  if (s.temperature_c) {
    ++st.temperature_samples;
    st.temperature_max_c = std::max(st.temperature_max_c, *s.temperature_c);
  }
  if (s.sm_clock_mhz) {
    clock_sum_ += *s.sm_clock_mhz;
    ++clock_samples_;
    st.sm_clock_mean_mhz = static_cast<unsigned>(clock_sum_ / double(clock_samples_) + 0.5);
  }
}

std::optional<NvmlSample> NvmlSampler::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

NvmlStats NvmlSampler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

nlohmann::json NvmlSampler::json() const {
  nlohmann::json j;
  j["name"] = device_name();
  j["nvml"] = available() ? std::string("available") : "unavailable: " + reason_;
  if (library_ && library_->available()) j["driver_version"] = library_->driver_version();
  const NvmlStats st = stats();
  j["samples"] = st.samples;
  if (st.gpu_util_samples > 0)
    j["utilization_percent"] = {{"mean", st.gpu_util_mean}, {"max", st.gpu_util_max}};
  if (st.memory_total > 0) {
    j["memory_used_max_bytes"] = st.memory_used_max;
    j["memory_total_bytes"] = st.memory_total;
  }
  if (st.power_samples > 0) j["power_watts_mean"] = st.power_watts_mean;
  if (st.temperature_samples > 0) j["temperature_max_c"] = st.temperature_max_c;
  if (st.sm_clock_mean_mhz > 0) j["sm_clock_mean_mhz"] = st.sm_clock_mean_mhz;
  return j;
}

std::string NvmlSampler::status_text() const {
  const std::optional<NvmlSample> s = latest();
  return s ? format_gpu_status(*s) : std::string();
}

std::string format_gpu_status(const NvmlSample& s) {
  std::string text = "gpu";
  if (s.gpu_util) text += fmt::format(" {}%", *s.gpu_util);
  if (s.memory_used && s.memory_total)
    text += fmt::format(" {:.1f}/{:.1f} GiB", *s.memory_used / double(1ull << 30),
                        *s.memory_total / double(1ull << 30));
  return text == "gpu" ? std::string() : text;
}

std::unique_ptr<NvmlSampler> device_sampler(Device device, double period_seconds) {
  if (device.is_cpu()) return nullptr;
  std::string bus_id, name;
#ifdef FTUNE_WITH_CUDA
  const DeviceCapabilities caps = device_capabilities(device);
  bus_id = caps.pci_bus_id;
  name = caps.name;
#endif
  return std::make_unique<NvmlSampler>(NvmlLibrary::open(), bus_id, device.index, period_seconds,
                                       name);
}

}  // namespace ftune::cuda
