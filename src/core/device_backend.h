// The accelerator operations core/ needs (device count, memory, copies, fills, step timing), as a table the
// accelerator backend installs: cuda/ registers its own (cuda/cuda_backend.cc) when the library is
// built with CUDA, so core/ stays below cuda/ in the layering and never includes it. Without an
// installed backend there are no CUDA devices, and CUDA memory operations throw NotBuiltError.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ftune {

struct DeviceBackend {
  int (*device_count)();  // 0 when the driver or a device is missing (never throws)
  void* (*malloc)(Device device, size_t bytes);  // throws OutOfMemoryError / DeviceError
  void (*free)(Device device, void* ptr);
  void (*memory_info)(Device device, size_t* available, size_t* total);
  void (*memcpy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
  void (*memset_zero)(void* dst, Device device, size_t bytes);
  void (*fill_f32)(float* dst, Device device, int64_t n, float value);
  // Timing on the compute stream (core/op_profile.h): events, recorded and compared.
  void (*synchronize)(Device device);
  void* (*timing_event_create)(Device device);
  void (*record_event)(Device device, void* event);  // on the compute stream
  float (*event_elapsed_ms)(void* start, void* end);
};

// Installed once, before main (a static initialiser of the backend).
void install_cuda_backend(const DeviceBackend* backend);
// The CUDA backend, or null in a build without it.
const DeviceBackend* cuda_backend();
// The backend, or NotBuiltError naming `what` was asked of a CUDA device.
const DeviceBackend& require_cuda_backend(const char* what);

}  // namespace ftune
