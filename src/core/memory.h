// Raw device memory and whole-tensor transfers. The only place that allocates device memory is
// device_malloc, called by Arena (one block per run) and HostTensor (tests, I/O staging); ops never
// allocate. An optional per-device budget makes out-of-memory reproducible on the CPU (tests of
// the memory planner's fallback use it).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace ftune {

// Alignment of every arena buffer: enough for 128-bit vector loads, cache lines and cuBLASLt.
constexpr size_t kBufferAlignment = 256;

inline size_t align_up(size_t n, size_t a = kBufferAlignment) {
  return (n + a - 1) / a * a;
}

// Allocates `bytes` on `device`; throws OutOfMemoryError naming the request when it cannot.
void* device_malloc(Device device, size_t bytes);
void device_free(Device device, void* ptr, size_t bytes);

// Bytes currently allocated through device_malloc on this device kind, and the peak.
size_t device_bytes_in_use(DeviceKind kind);
size_t device_bytes_peak(DeviceKind kind);

// Caps what device_malloc may hand out on this device kind (nullopt removes the cap).
void set_device_memory_limit(DeviceKind kind, std::optional<size_t> bytes);

// What a run may still allocate on a device, and the device's size: for a GPU what the driver
// reports (cudaMemGetInfo); for the CPU the kernel's MemAvailable, bounded by the cgroup's
// memory.max less its usage (containers). An artificial limit (set_device_memory_limit) bounds
// both: the memory planner then sees exactly what device_malloc will allow.
struct DeviceMemoryInfo {
  size_t available = 0;
  size_t total = 0;
  std::string source;  // where the numbers come from, for logs ("/proc/meminfo", "cgroup", ...)
};
DeviceMemoryInfo device_memory_info(Device device);

// This process's resident memory (/proc/self/status; zeros where it is missing): all of it, its
// anonymous part (heap, stacks, the arena) and its file-backed part (mapped libraries and files,
// which /proc/meminfo's MemAvailable counts as reclaimable), and the peak so far.
struct ProcessMemory {
  size_t rss = 0, rss_anon = 0, rss_file = 0, peak_rss = 0;
};
ProcessMemory process_memory();

// Copies src into dst: same dtype and shape, both contiguous, any pair of devices.
void copy(TensorView dst, TensorView src);
// Copies with dtype conversion between f32, bf16 and f16 (CPU views only).
void convert(TensorView dst, TensorView src);
// copy() or convert() between any pair of devices (a device side is staged through the host): a
// parameter stored in 16 bits read or written as fp32 (loaders, savers).
void convert_copy(TensorView dst, TensorView src);
// Reads a 1-element f32 tensor from any device (a synchronisation point on accelerators: call
// it once per logging interval, not per kernel).
float to_host_scalar(TensorView src);
// How many times to_host_scalar ran in this process (tests: what a run reads back, and when).
int64_t host_scalar_reads();
// Sets every byte of dst to zero.
void fill_zero(TensorView dst);
// Sets every element of an f32 view to value.
void fill(TensorView dst, float value);

// An owning, contiguous host buffer: tests, loaders and staging use it; the step loop does not.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);
  ~HostTensor();
  HostTensor(HostTensor&& other) noexcept;
  HostTensor& operator=(HostTensor&& other) noexcept;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  TensorView view() const { return view_; }
  template <typename T>
  T* data() const {
    return view_.data_as<T>();
  }
  int64_t numel() const { return view_.numel(); }
  const Shape& shape() const { return view_.shape; }

 private:
  TensorView view_;
  size_t bytes_ = 0;
};

}  // namespace ftune
