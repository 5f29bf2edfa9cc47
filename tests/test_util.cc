// Shared test helpers (see test_util.h).
#include "test_util.h"

#include <fstream>

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "cuda/cuda_libraries.h"

namespace ftune::test {

uint64_t test_seed() {
  if (const char* s = std::getenv("FTUNE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static const uint64_t seed = std::random_device{}();
  return seed;
}

HostTensor random_tensor(Shape shape, std::mt19937_64& rng, float lo, float hi) {
  HostTensor t(DType::F32, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

HostTensor poisoned_tensor(Shape shape) {
  HostTensor t(DType::F32, shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

HostTensor tensor_from(const std::vector<float>& values, Shape shape) {
  HostTensor t(DType::F32, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), shape.numel());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

std::vector<float> to_vector(TensorView v) {
  HostTensor host(v.dtype, v.shape);
  copy(host.view(), v);
  HostTensor f32(DType::F32, v.shape);
  convert(f32.view(), host.view());
  const float* p = f32.data<float>();
  return std::vector<float>(p, p + f32.numel());
}

double max_rel_error(TensorView a, TensorView b, double floor) {
  const std::vector<float> x = to_vector(a), y = to_vector(b);
  EXPECT_EQ(x.size(), y.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double d = std::fabs(double(x[i]) - double(y[i]));
    max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
    max_ref = std::max(max_ref, std::fabs(double(y[i])));
  }
  return max_diff / std::max(max_ref, floor);
}

double max_elementwise_rel_error(TensorView a, TensorView b, double floor) {
  const std::vector<float> x = to_vector(a), y = to_vector(b);
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double d =
        std::fabs(double(x[i]) - double(y[i])) / std::max(std::fabs(double(y[i])), floor);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

DeviceTensor::DeviceTensor(Device device, DType dtype, Shape shape) {
  bytes_ = std::max<size_t>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), 1);
  view_ = TensorView(device_malloc(device, bytes_), dtype, device, shape);
}

DeviceTensor::~DeviceTensor() {
  if (view_.data) device_free(view_.device, view_.data, bytes_);
}

DeviceTensor to_device(const HostTensor& host, Device device) {
  DeviceTensor t(device, host.view().dtype, host.shape());
  copy(t.view(), host.view());
  return t;
}

DeviceTensor device_f32(const std::vector<float>& values, Shape shape, Device device) {
  return to_device(tensor_from(values, shape), device);
}

DeviceTensor device_i32(const std::vector<int32_t>& values, Shape shape, Device device) {
  HostTensor h(DType::I32, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), shape.numel());
  std::copy(values.begin(), values.end(), h.data<int32_t>());
  return to_device(h, device);
}

DeviceTensor poisoned(Shape shape, Device device) {
  return to_device(poisoned_tensor(shape), device);
}

DeviceTensor zeros(Shape shape, Device device, DType dtype) {
  DeviceTensor t(device, dtype, shape);
  fill_zero(t.view());
  return t;
}

std::string device_param_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda" + std::to_string(info.param.index);
}

std::vector<Device> devices_present() {
  std::vector<Device> out{Device::cpu()};
  if (cuda_device_count() > 0) out.push_back(Device::cuda(0));
  return out;
}

namespace {
// A path compiled in at build time, unless the environment names another: the GPU kit
// (tools/gpu_kit.sh) runs the test binaries far from the tree they were built in.
std::string env_or(const char* name, const char* built_in) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(built_in);
}
}  // namespace

std::string fixtures_dir() {
  return env_or("FTUNE_TEST_FIXTURES_DIR", FTUNE_FIXTURES_DIR);
}
std::string source_dir() {
  return env_or("FTUNE_TEST_SOURCE_DIR", FTUNE_SOURCE_DIR);
}
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string ftune_binary() {
  return env_or("FTUNE_TEST_BINARY", FTUNE_BINARY);
}

std::string fake_nvml_library() {
  return env_or("FTUNE_TEST_FAKE_NVML", FTUNE_FAKE_NVML);
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  if (value)
    ::setenv(name, value, 1);
  else
    ::unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
  if (old_)
    ::setenv(name_, old_->c_str(), 1);
  else
    ::unsetenv(name_);
}

bool cudnn_required_by_env() {
  return cuda::cudnn_required();
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ftune_test_XXXXXX").string();
  path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  EXPECT_FALSE(path_.empty());
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace ftune::test
