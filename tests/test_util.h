// Helpers shared by all tests: random inputs, poisoned outputs, error measures, the list of
// devices present (CPU always, CUDA when built and a GPU exists), fixture paths.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"

namespace ftune::test {

// A fresh seed per run (printed on failure through SCOPED_TRACE in the tests that use it), unless
// FTUNE_TEST_SEED is set to reproduce one.
uint64_t test_seed();

HostTensor random_tensor(Shape shape, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f);
HostTensor poisoned_tensor(Shape shape);  // every element NaN: an unwritten output fails
HostTensor tensor_from(const std::vector<float>& values, Shape shape);
std::vector<float> to_vector(TensorView v);  // any device, f32

// max_i |a_i - b_i| / max(max_i |b_i|, floor): one number per tensor, scale-aware.
double max_rel_error(TensorView a, TensorView b, double floor = 1e-6);
// The same, per element: max_i |a_i - b_i| / max(|b_i|, floor).
double max_elementwise_rel_error(TensorView a, TensorView b, double floor);

// An owning buffer on any device (tests only; the engine itself uses arenas).
class DeviceTensor {
 public:
  DeviceTensor(Device device, DType dtype, Shape shape);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& o) noexcept : view_(o.view_), bytes_(o.bytes_) {
    o.view_.data = nullptr;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  TensorView view() const { return view_; }

 private:
  TensorView view_;
  size_t bytes_;
};

// A device copy of a host tensor.
DeviceTensor to_device(const HostTensor& host, Device device);
// Same, from f32 values / i32 values.
DeviceTensor device_f32(const std::vector<float>& values, Shape shape, Device device);
DeviceTensor device_i32(const std::vector<int32_t>& values, Shape shape, Device device);
// A device tensor filled with NaN (f32): outputs that are never written make the test fail.
DeviceTensor poisoned(Shape shape, Device device);
DeviceTensor zeros(Shape shape, Device device, DType dtype = DType::F32);

std::vector<Device> devices_present();
std::string device_param_name(const ::testing::TestParamInfo<Device>& info);
// Paths compiled in at build time; the environment variables in brackets name others (the GPU
// kit runs the test binaries from its own folder: tools/gpu_kit.sh).
std::string fixtures_dir();  // tests/fixtures in the source tree [FTUNE_TEST_FIXTURES_DIR]
std::string source_dir();    // [FTUNE_TEST_SOURCE_DIR]
std::string ftune_binary();  // path of the built `ftune` executable [FTUNE_TEST_BINARY]
std::string fake_nvml_library();  // tests/cuda/fake_nvml, built as a module [FTUNE_TEST_FAKE_NVML]
// The bytes of a file (empty when it cannot be read): for comparing files a run wrote.
std::string file_bytes(const std::string& path);

// Sets (or, with nullptr, unsets) an environment variable and restores it when it goes away.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A cuDNN test that cannot run here (no cuDNN in the build, cuDNN refused the shape): skipped,
// or failed with cuDNN's reason where FTUNE_REQUIRE_CUDNN=1 (the GPU kit on sm_90) says it must
// run. For SetUp() and test bodies.
#define FTUNE_SKIP_OR_REQUIRE_CUDNN(why)                                          \
  do {                                                                            \
    if (::ftune::test::cudnn_required_by_env())                                   \
      GTEST_FAIL() << "FTUNE_REQUIRE_CUDNN=1 and cuDNN cannot run this: " << (why); \
    GTEST_SKIP() << (why);                                                        \
  } while (0)
bool cudnn_required_by_env();

// A temporary directory removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ftune::test
