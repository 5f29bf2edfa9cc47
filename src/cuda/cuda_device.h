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
// Free and total bytes of the device as the driver reports them (cudaMemGetInfo).
void memory_info(Device device, size_t* free_bytes, size_t* total_bytes);
std::string device_description(Device device);  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"

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
