// NVML loading and sampling against a fake libnvidia-ml (tests/cuda/fake_nvml), so it runs on any
// machine: symbol resolution and driver version, init/shutdown pairing, CUDA -> NVML device
// mapping by PCI bus id (the fake numbers its devices differently from their bus order), the
// sampler's aggregation over a scripted sequence and on its own thread, and the "unavailable"
// states (missing library, not an NVML library, failing nvmlInit) that must never be errors.
#include "cuda/nvml.h"
#include "test_util.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace ftune::cuda {
namespace {

constexpr unsigned long long GiB = 1ull << 30;

// The test's own handle on the fake: the same loaded object as NvmlLibrary's, so the script set
// here is what NvmlLibrary reads.
class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    dl_ = dlopen(test::fake_nvml_library().c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(dl_, nullptr) << dlerror();
    reset_ = reinterpret_cast<void (*)(int, bool)>(dlsym(dl_, "fake_nvml_reset"));
    script_ = reinterpret_cast<decltype(script_)>(dlsym(dl_, "fake_nvml_script"));
    init_calls_ = reinterpret_cast<int (*)()>(dlsym(dl_, "fake_nvml_init_calls"));
    shutdown_calls_ = reinterpret_cast<int (*)()>(dlsym(dl_, "fake_nvml_shutdown_calls"));
    samples_taken_ = reinterpret_cast<int (*)()>(dlsym(dl_, "fake_nvml_samples_taken"));
    ASSERT_TRUE(reset_ && script_ && init_calls_ && shutdown_calls_ && samples_taken_);
    reset_(0, true);
  }
  void TearDown() override {
    if (dl_) dlclose(dl_);
  }

  void* dl_ = nullptr;
  void (*reset_)(int, bool) = nullptr;
  void (*script_)(int, const unsigned*, const unsigned long long*, const unsigned*,
                  const unsigned*) = nullptr;
  int (*init_calls_)() = nullptr;
  int (*shutdown_calls_)() = nullptr;
  int (*samples_taken_)() = nullptr;
};

TEST(Nvml, MissingLibraryIsUnavailableWithReason) {
  const auto lib = NvmlLibrary::open("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(lib->available());
  EXPECT_NE(lib->reason().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos)
      << lib->reason();
  EXPECT_EQ(lib->driver_version(), "");
  std::string why;
  EXPECT_FALSE(lib->device("", 0, &why));
  EXPECT_EQ(why, lib->reason());

  NvmlSampler sampler(lib, "", 0, 0.5, "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(sampler.available());
  EXPECT_EQ(sampler.device_name(), "NVIDIA H100 80GB HBM3");  // CUDA's name when NVML has none
  sampler.start();                                            // inert: no thread, no samples
  sampler.sample_once();
  sampler.stop();
  EXPECT_EQ(sampler.stats().samples, 0);
  EXPECT_EQ(sampler.status_text(), "");
  const nlohmann::json j = sampler.json();
  EXPECT_EQ(j["nvml"].get<std::string>().rfind("unavailable: ", 0), 0u) << j.dump();
  EXPECT_EQ(j["samples"], 0);
  EXPECT_EQ(j["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(j.contains("utilization_percent"));
  EXPECT_FALSE(j.contains("driver_version"));
}

TEST(Nvml, LibraryPathFromEnvironment) {
  ASSERT_EQ(setenv("FTUNE_NVML_LIBRARY", "/nonexistent/from-env.so", 1), 0);
  const auto lib = NvmlLibrary::open();
  unsetenv("FTUNE_NVML_LIBRARY");
  EXPECT_EQ(lib->path(), "/nonexistent/from-env.so");
  EXPECT_NE(lib->reason().find("from-env.so"), std::string::npos) << lib->reason();
}

TEST(Nvml, LibraryWithoutNvmlSymbolsIsUnavailable) {
  const auto lib = NvmlLibrary::open("libm.so.6");
  EXPECT_FALSE(lib->available());
  EXPECT_NE(lib->reason().find("no symbol nvmlInit_v2"), std::string::npos) << lib->reason();
}

TEST_F(FakeNvml, FailingInitIsUnavailableWithNvmlsMessage) {
  reset_(9, true);  // NVML_ERROR_DRIVER_NOT_LOADED
  {
    const auto lib = NvmlLibrary::open(test::fake_nvml_library());
    EXPECT_FALSE(lib->available());
    EXPECT_EQ(lib->reason(), "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)");
    NvmlSampler sampler(lib, "0000:17:00.0", 0);
    EXPECT_FALSE(sampler.available());
    EXPECT_EQ(sampler.json()["nvml"], "unavailable: " + lib->reason());
  }
  EXPECT_EQ(init_calls_(), 1);
  EXPECT_EQ(shutdown_calls_(), 0);  // nothing to shut down after a failed init
}

TEST_F(FakeNvml, ResolvesSymbolsInitialisesOnceAndShutsDown) {
  {
    const auto lib = NvmlLibrary::open(test::fake_nvml_library());
    ASSERT_TRUE(lib->available()) << lib->reason();
    EXPECT_EQ(lib->reason(), "");
    EXPECT_EQ(lib->driver_version(), "580.65.06");
    EXPECT_EQ(init_calls_(), 1);
    EXPECT_EQ(shutdown_calls_(), 0);
  }
  EXPECT_EQ(shutdown_calls_(), 1);
}

TEST(Nvml, BusIdsNormaliseToNvmlForm) {
  EXPECT_EQ(nvml_bus_id("0000:65:00.0"), "00000000:65:00.0");  // cudaDeviceGetPCIBusId's form
  EXPECT_EQ(nvml_bus_id("00000000:65:00.0"), "00000000:65:00.0");
  EXPECT_EQ(nvml_bus_id("0001:af:1f.7"), "00000001:AF:1F.7");
  EXPECT_EQ(nvml_bus_id("65:00.0"), "");
  EXPECT_EQ(nvml_bus_id("0000:65:00.0x"), "");
  EXPECT_EQ(nvml_bus_id(""), "");
}

TEST_F(FakeNvml, CudaDeviceMapsToNvmlDeviceByBusIdNotIndex) {
  const auto lib = NvmlLibrary::open(test::fake_nvml_library());
  ASSERT_TRUE(lib->available()) << lib->reason();
  std::string why;
  // cuda:0 sits at bus 17, which NVML numbers 1.
  const auto by_bus = lib->device("0000:17:00.0", 0, &why);
  ASSERT_TRUE(by_bus) << why;
  EXPECT_EQ(by_bus->name, "Fake GPU at 17");
  EXPECT_EQ(by_bus->pci_bus_id, "00000000:17:00.0");
  const auto by_index = lib->device("", 0, &why);  // no bus id: the index is taken as NVML's
  ASSERT_TRUE(by_index) << why;
  EXPECT_EQ(by_index->name, "Fake GPU at 65");

  EXPECT_FALSE(lib->device("0000:99:00.0", 0, &why));
  EXPECT_EQ(why, "no NVML device at PCI bus id 00000000:99:00.0: Not Found (NVML error 6)");
  EXPECT_FALSE(lib->device("", 5, &why));
  EXPECT_EQ(why, "no NVML device with index 5: Invalid Argument (NVML error 2)");
  EXPECT_FALSE(lib->device("bus 17", 0, &why));
  EXPECT_NE(why.find("'bus 17' is not a PCI bus id"), std::string::npos) << why;
  EXPECT_EQ(lib->max_sm_clock_mhz(*by_bus), 1980u);
}

TEST_F(FakeNvml, SamplerAggregatesScriptedSamples) {
  const unsigned util[] = {10, 90, 50, 30};
  const unsigned long long used[] = {1 * GiB, 4 * GiB, 2 * GiB, 3 * GiB};
  const unsigned power_mw[] = {100000, 200000, 300000, 400000};
  const unsigned temp[] = {40, 70, 55, 60};
  script_(4, util, used, power_mw, temp);
  NvmlSampler sampler(NvmlLibrary::open(test::fake_nvml_library()), "0000:65:00.0", 1);
  ASSERT_TRUE(sampler.available()) << sampler.reason();
  EXPECT_EQ(sampler.device_name(), "Fake GPU at 65");
  EXPECT_EQ(sampler.status_text(), "");  // nothing sampled yet
  for (int i = 0; i < 4; ++i) sampler.sample_once();

  const NvmlStats st = sampler.stats();
  EXPECT_EQ(st.samples, 4);
  EXPECT_DOUBLE_EQ(st.gpu_util_mean, 45.0);
  EXPECT_EQ(st.gpu_util_max, 90u);
  EXPECT_EQ(st.memory_used_max, 4 * GiB);
  EXPECT_EQ(st.memory_total, 80 * GiB);
  EXPECT_DOUBLE_EQ(st.power_watts_mean, 250.0);
  EXPECT_EQ(st.temperature_max_c, 70u);
  EXPECT_EQ(st.sm_clock_mean_mhz, 1755u);

  const auto last = sampler.latest();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->gpu_util, 30u);
  EXPECT_EQ(last->memory_util, 15u);
  EXPECT_EQ(last->memory_used, 3 * GiB);
  EXPECT_DOUBLE_EQ(*last->power_watts, 400.0);
  EXPECT_EQ(last->temperature_c, 60u);
  EXPECT_EQ(sampler.status_text(), "gpu 30% 3.0/80.0 GiB");

  const nlohmann::json j = sampler.json();
  EXPECT_EQ(j["name"], "Fake GPU at 65");
  EXPECT_EQ(j["nvml"], "available");
  EXPECT_EQ(j["driver_version"], "580.65.06");
  EXPECT_EQ(j["samples"], 4);
  EXPECT_DOUBLE_EQ(j["utilization_percent"]["mean"].get<double>(), 45.0);
  EXPECT_EQ(j["utilization_percent"]["max"], 90);
  EXPECT_EQ(j["memory_used_max_bytes"], 4 * GiB);
  EXPECT_EQ(j["memory_total_bytes"], 80 * GiB);
  EXPECT_DOUBLE_EQ(j["power_watts_mean"].get<double>(), 250.0);
  EXPECT_EQ(j["temperature_max_c"], 70);
}

TEST_F(FakeNvml, UnsupportedMetricIsLeftOut) {
  reset_(0, /*power_supported=*/false);
  NvmlSampler sampler(NvmlLibrary::open(test::fake_nvml_library()), "", 0);
  ASSERT_TRUE(sampler.available()) << sampler.reason();
  sampler.sample_once();
  EXPECT_FALSE(sampler.latest()->power_watts);
  EXPECT_EQ(sampler.stats().power_samples, 0);
  const nlohmann::json j = sampler.json();
  EXPECT_FALSE(j.contains("power_watts_mean")) << j.dump();
  EXPECT_TRUE(j.contains("utilization_percent")) << j.dump();
}

TEST_F(FakeNvml, ThreadSamplesEveryPeriodUntilStopped) {
  NvmlSampler sampler(NvmlLibrary::open(test::fake_nvml_library()), "0000:65:00.0", 0, 0.01);
  ASSERT_TRUE(sampler.available()) << sampler.reason();
  sampler.start();
  sampler.start();  // a second start is a no-op
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sampler.stats().samples < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  sampler.stop();
  const int64_t n = sampler.stats().samples;
  EXPECT_GE(n, 3);
  EXPECT_EQ(samples_taken_(), n);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(sampler.stats().samples, n);  // stopped means stopped
  EXPECT_EQ(sampler.status_text(), "gpu 50% 1.0/80.0 GiB");
}

TEST(Nvml, NoSamplerForTheCpu) {
  EXPECT_EQ(device_sampler(Device::cpu()), nullptr);  // CPU runs are unchanged
}

TEST(Nvml, GpuStatusText) {
  NvmlSample s;
  EXPECT_EQ(format_gpu_status(s), "");
  s.gpu_util = 97;
  EXPECT_EQ(format_gpu_status(s), "gpu 97%");
  s.memory_used = static_cast<uint64_t>(41.2 * GiB);
  s.memory_total = static_cast<uint64_t>(79.6 * GiB);
  EXPECT_EQ(format_gpu_status(s), "gpu 97% 41.2/79.6 GiB");
}

}  // namespace
}  // namespace ftune::cuda
