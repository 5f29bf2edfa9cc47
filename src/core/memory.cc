// Device allocation with accounting and an optional budget, and transfers between devices.
#include "core/memory.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <mutex>

#include "core/device_backend.h"

namespace ftune {
namespace {

struct Accounting {
  std::mutex mu;
  size_t in_use = 0;
  size_t peak = 0;
  std::optional<size_t> limit;
};

Accounting& accounting(DeviceKind kind) {
  static Accounting cpu, gpu;
  return kind == DeviceKind::CPU ? cpu : gpu;
}

std::string human_bytes(size_t b) {
  if (b >= (size_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(size_t{1} << 30));
  if (b >= (size_t{1} << 20)) return fmt::format("{:.2f} MiB", b / double(size_t{1} << 20));
  return fmt::format("{} B", b);
}

void check_transfer(TensorView dst, TensorView src, const char* what) {
  if (!(dst.shape == src.shape))
    throw ShapeError(fmt::format("{}: shape {} vs {}", what, dst.shape.str(), src.shape.str()));
  if (!dst.is_contiguous() || !src.is_contiguous())
    throw ShapeError(fmt::format("{}: views must be contiguous", what));
}

}  // namespace

void* device_malloc(Device device, size_t bytes) {
  Accounting& acc = accounting(device.kind);
  {
    std::lock_guard<std::mutex> lock(acc.mu);
    if (acc.limit && acc.in_use + bytes > *acc.limit)
      throw OutOfMemoryError(fmt::format("out of memory on {}: requested {}, {} in use, limit {}",
                                         device_name(device), human_bytes(bytes),
                                         human_bytes(acc.in_use), human_bytes(*acc.limit)));
    acc.in_use += bytes;
    acc.peak = std::max(acc.peak, acc.in_use);
  }
  void* p = nullptr;
  if (device.kind == DeviceKind::CPU) {
    p = bytes ? std::aligned_alloc(kBufferAlignment, align_up(bytes)) : nullptr;
    if (bytes && !p) {
      std::lock_guard<std::mutex> lock(acc.mu);
      acc.in_use -= bytes;
      throw OutOfMemoryError(fmt::format("out of host memory: requested {}", human_bytes(bytes)));
    }
    return p;
  }
  try {
    return require_cuda_backend("CUDA device memory requested").malloc(device, bytes);
  } catch (...) {
    std::lock_guard<std::mutex> lock(acc.mu);
    acc.in_use -= bytes;
    throw;
  }
}

void device_free(Device device, void* ptr, size_t bytes) {
  if (!ptr) return;
  Accounting& acc = accounting(device.kind);
  {
    std::lock_guard<std::mutex> lock(acc.mu);
    acc.in_use -= std::min(acc.in_use, bytes);
  }
  if (device.kind == DeviceKind::CPU) {
    std::free(ptr);
    return;
  }
  if (const DeviceBackend* b = cuda_backend()) b->free(device, ptr);
}

size_t device_bytes_in_use(DeviceKind kind) {
  Accounting& acc = accounting(kind);
  std::lock_guard<std::mutex> lock(acc.mu);
  return acc.in_use;
}

size_t device_bytes_peak(DeviceKind kind) {
  Accounting& acc = accounting(kind);
  std::lock_guard<std::mutex> lock(acc.mu);
  return acc.peak;
}

void set_device_memory_limit(DeviceKind kind, std::optional<size_t> bytes) {
  Accounting& acc = accounting(kind);
  std::lock_guard<std::mutex> lock(acc.mu);
  acc.limit = bytes;
}

namespace {

// A "key: value kB" line of /proc/meminfo or /proc/self/status, in bytes (nullopt when missing).
std::optional<size_t> kb_line(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return size_t{std::stoull(line.substr(prefix.size()))} * 1024;
  return std::nullopt;
}

// A number in a cgroup v2 file ("max" or missing: nullopt).
std::optional<size_t> cgroup_bytes(const char* file) {
  std::ifstream in(std::string("/sys/fs/cgroup/") + file);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return size_t{std::stoull(word)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

DeviceMemoryInfo device_memory_info(Device device) {
  DeviceMemoryInfo info;
  if (device.is_cpu()) {
    info.total = kb_line("/proc/meminfo", "MemTotal").value_or(0);
    info.available = kb_line("/proc/meminfo", "MemAvailable").value_or(info.total);
    info.source = "/proc/meminfo";
    if (const auto max = cgroup_bytes("memory.max"); max && *max < info.total) {
      const size_t used = cgroup_bytes("memory.current").value_or(0);
      info.total = *max;
      info.available = std::min(info.available, *max > used ? *max - used : 0);
      info.source = "cgroup memory.max";
    }
  } else {
    require_cuda_backend("CUDA device memory queried")
        .memory_info(device, &info.available, &info.total);
    info.source = "cudaMemGetInfo";
  }
  Accounting& acc = accounting(device.kind);
  std::lock_guard<std::mutex> lock(acc.mu);
  if (acc.limit) {
    const size_t left = *acc.limit > acc.in_use ? *acc.limit - acc.in_use : 0;
    if (left < info.available || *acc.limit < info.total) {
      info.available = std::min(info.available, left);
      info.total = std::min(info.total, *acc.limit);
      info.source = "memory limit";
    }
  }
  return info;
}

ProcessMemory process_memory() {
  ProcessMemory m;
  m.rss = kb_line("/proc/self/status", "VmRSS").value_or(0);
  m.rss_anon = kb_line("/proc/self/status", "RssAnon").value_or(0);
  m.rss_file = kb_line("/proc/self/status", "RssFile").value_or(0);
  m.peak_rss = kb_line("/proc/self/status", "VmHWM").value_or(0);
  return m;
}

void copy(TensorView dst, TensorView src) {
  check_transfer(dst, src, "copy");
  if (dst.dtype != src.dtype)
    throw ShapeError(fmt::format("copy: dtype {} vs {} (use convert)", dtype_name(dst.dtype),
                                 dtype_name(src.dtype)));
  if (dst.device.is_cpu() && src.device.is_cpu()) {
    if (dst.data != src.data) std::memmove(dst.data, src.data, src.nbytes());
    return;
  }
  require_cuda_backend("copy to or from a CUDA device")
      .memcpy(dst.data, dst.device, src.data, src.device, src.nbytes());
}

void convert_copy(TensorView dst, TensorView src) {
  if (dst.dtype == src.dtype) return copy(dst, src);
  if (dst.device.is_cpu() && src.device.is_cpu()) return convert(dst, src);
  HostTensor s(src.dtype, src.shape), d(dst.dtype, dst.shape);
  copy(s.view(), src);
  convert(d.view(), s.view());
  copy(dst, d.view());
}

void convert(TensorView dst, TensorView src) {
  check_transfer(dst, src, "convert");
  if (!dst.device.is_cpu() || !src.device.is_cpu())
    throw ShapeError("convert: only host views are supported");
  if (dst.dtype == src.dtype) return copy(dst, src);
  const int64_t n = src.numel();
  auto load = [&](int64_t i) -> float {
    switch (src.dtype) {
      case DType::F32:
        return static_cast<const float*>(src.data)[i];
      case DType::BF16:
        return bf16_to_float(static_cast<const bf16_t*>(src.data)[i]);
      case DType::F16:
        return f16_to_float(static_cast<const f16_t*>(src.data)[i]);
      default:
        throw ShapeError(
            fmt::format("convert: unsupported source dtype {}", dtype_name(src.dtype)));
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (dst.dtype) {
      case DType::F32:
        static_cast<float*>(dst.data)[i] = v;
        break;
      case DType::BF16:
        static_cast<bf16_t*>(dst.data)[i] = float_to_bf16(v);
        break;
      case DType::F16:
        static_cast<f16_t*>(dst.data)[i] = float_to_f16(v);
        break;
      default:
        throw ShapeError(
            fmt::format("convert: unsupported target dtype {}", dtype_name(dst.dtype)));
    }
  }
}

namespace {
std::atomic<int64_t> g_host_scalar_reads{0};
}  // namespace

int64_t host_scalar_reads() { return g_host_scalar_reads.load(std::memory_order_relaxed); }

float to_host_scalar(TensorView src) {
  g_host_scalar_reads.fetch_add(1, std::memory_order_relaxed);
  if (src.numel() != 1 || src.dtype != DType::F32)
    throw ShapeError("to_host_scalar: expected one f32 element, got " + src.describe());
  float value = 0.0f;
  copy(TensorView(&value, DType::F32, Device::cpu(), src.shape), src);
  return value;
}

void fill_zero(TensorView dst) {
  if (!dst.is_contiguous()) throw ShapeError("fill_zero: view must be contiguous");
  if (dst.device.is_cpu()) {
    std::memset(dst.data, 0, dst.nbytes());
    return;
  }
  require_cuda_backend("fill_zero on a CUDA device").memset_zero(dst.data, dst.device, dst.nbytes());
}

void fill(TensorView dst, float value) {
  if (!dst.is_contiguous()) throw ShapeError("fill: view must be contiguous");
  float* p = dst.data_as<float>();
  if (dst.device.is_cpu()) {
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) p[i] = value;
    return;
  }
  require_cuda_backend("fill on a CUDA device").fill_f32(p, dst.device, dst.numel(), value);
}

HostTensor::HostTensor(DType dtype, Shape shape) {
  bytes_ = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = device_malloc(Device::cpu(), std::max<size_t>(bytes_, 1));
  std::memset(p, 0, std::max<size_t>(bytes_, 1));
  view_ = TensorView(p, dtype, Device::cpu(), shape);
}

HostTensor::~HostTensor() {
  device_free(Device::cpu(), view_.data, std::max<size_t>(bytes_, 1));
}

HostTensor::HostTensor(HostTensor&& other) noexcept : view_(other.view_), bytes_(other.bytes_) {
  other.view_ = TensorView();
  other.bytes_ = 0;
}

HostTensor& HostTensor::operator=(HostTensor&& other) noexcept {
  if (this != &other) {
    device_free(Device::cpu(), view_.data, std::max<size_t>(bytes_, 1));
    view_ = other.view_;
    bytes_ = other.bytes_;
    other.view_ = TensorView();
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace ftune
