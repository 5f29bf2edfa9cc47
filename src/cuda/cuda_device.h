// The CUDA backend's host-side API, in plain C++ (no CUDA headers), so core code can call it
// without being compiled by nvcc. Only built with FTUNE_CUDA=ON (FTUNE_WITH_CUDA defined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace ftune::cuda {

int device_count();                         // 0 when the driver or a GPU is missing (never throws)
void* malloc(Device device, size_t bytes);  // throws OutOfMemoryError / DeviceError
void free(Device device, void* ptr);
void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void memset_zero(void* dst, Device device, size_t bytes);
void fill_f32(float* dst, Device device, int64_t n, float value);
void synchronize(Device device);
void use_device(Device device);  // makes `device` the calling thread's current device
// Free and total bytes of the device as the driver reports them (cudaMemGetInfo).
void memory_info(Device device, size_t* free_bytes, size_t* total_bytes);
std::string device_description(Device device);  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"

// Input staging (train/input_staging.h): page-locked host memory, from which host-to-device copies
// run asynchronously on the device's copy stream, and events that order the copy stream and the
// compute stream without the host waiting. Events are opaque handles (cudaEvent_t, timing off).
void* host_alloc_pinned(size_t bytes);  // cudaHostAlloc; throws OutOfMemoryError / DeviceError
void host_free_pinned(void* ptr);
void* event_create(Device device);
void event_destroy(void* event);
void event_synchronize(void* event);  // the host waits for the event's work (none recorded: at once)
// On the copy stream of `device`: wait for `after` (null: nothing), copy `bytes` from pinned host
// memory to the device, record `done`.
void copy_to_device_on_copy_stream(void* dst, Device device, const void* src, size_t bytes,
                                   void* after, void* done);
void compute_stream_wait(Device device, void* event);    // later compute work waits for `event`
void record_on_compute_stream(Device device, void* event);
// A device-to-device copy in order on the compute stream of `device` (asynchronous).
void copy_on_compute_stream(void* dst, Device device, const void* src, size_t bytes);
// A device-to-host copy into pinned memory in order on the compute stream, then `done` recorded
// there (asynchronous: the host waits on `done` when it reads dst; train/eval_readback.h).
void copy_to_host_on_compute_stream(void* dst, Device device, const void* src, size_t bytes,
                                    void* done);

// Waits for the current device's compute stream and checks for a pending error (a failed launch
// or a fault of any kernel queued so far): throws DeviceError "<what>: <CUDA's error>". For
// FTUNE_CUDA_DEBUG_SYNC (ops/dispatch.h).
void synchronize_and_check(const std::string& what);
// Per-op timing (core/op_profile.h): an event with timing on, and the milliseconds between two
// recorded events (both complete).
void* timing_event_create(Device device);
float event_elapsed_ms(void* start, void* end);

// What a device can do, from cudaGetDeviceProperties and the driver / runtime versions.
struct DeviceCapabilities {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int sm_count = 0;
  size_t total_bytes = 0;
  int clock_khz = 0;             // peak SM clock (for MFU estimates)
  int driver_version = 0;        // e.g. 13000 for CUDA 13.0
  int runtime_version = 0;
  bool bf16 = false;  // bf16 tensor-core math (sm_80 and later)
  bool tf32 = false;  // TF32 tensor-core math for fp32 GEMMs (sm_80 and later)
  bool fp16 = false;  // fp16 tensor-core math (sm_70 and later)
  std::string pci_bus_id;  // "0000:65:00.0" (cudaDeviceGetPCIBusId): finds the device in NVML
};
DeviceCapabilities device_capabilities(Device device);

}  // namespace ftune::cuda
