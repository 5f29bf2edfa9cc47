// Where a tensor's memory lives. Every buffer belongs to exactly one device; ops dispatch on it.
#pragma once

#include <string>

namespace ftune {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceKind::CUDA, index}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool operator==(const Device&) const = default;
};

std::string device_name(Device device);  // "cpu", "cuda:0"

// Parses "cpu", "cuda", "cuda:N"; throws InputError naming the accepted forms otherwise.
Device parse_device(const std::string& text);

// parse_device(text) checked against this build and machine: InputError "WHAT is 'cuda', but no
// CUDA GPU is visible" (or not built with CUDA, or fewer GPUs) instead of a driver error later.
Device usable_device(const std::string& text, const std::string& what);

// True when this build has the CUDA backend compiled in (FTUNE_CUDA=ON).
bool cuda_built();

// Number of CUDA devices visible at run time (0 without the backend or without a GPU).
int cuda_device_count();

}  // namespace ftune
