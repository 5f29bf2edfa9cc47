// Device names and parsing; the CUDA queries forward to the installed CUDA backend
// (core/device_backend.h).
#include "core/device.h"

#include <fmt/format.h>

#include <atomic>

#include "core/device_backend.h"
#include "core/error.h"

namespace ftune {

std::string device_name(Device device) {
  if (device.kind == DeviceKind::CPU) return "cpu";
  return fmt::format("cuda:{}", device.index);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string idx = text.substr(5);
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 4)
      return Device::cuda(std::stoi(idx));
  }
  throw InputError(fmt::format("unknown device '{}': expected 'cpu', 'cuda' or 'cuda:N'", text));
}

Device usable_device(const std::string& text, const std::string& what) {
  Device device;
  try {
    device = parse_device(text);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", what, e.what()));
  }
  if (device.is_cpu()) return device;
  if (!cuda_built())
    throw InputError(fmt::format(
        "{} is '{}', but this ftune was built without CUDA (rebuild with -DFTUNE_CUDA=ON, or use "
        "cpu)",
        what, text));
  const int count = cuda_device_count();
  if (device.index >= count)
    throw InputError(
        fmt::format("{} is '{}', but {} (`ftune doctor` lists the devices; or use cpu)", what, text,
                    count == 0 ? std::string("no CUDA GPU is visible")
                               : fmt::format("only {} CUDA GPU{} visible (cuda:0 .. cuda:{})",
                                             count, count == 1 ? " is" : "s are", count - 1)));
  return device;
}

bool cuda_built() {
#ifdef FTUNE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {
std::atomic<const DeviceBackend*> g_cuda_backend{nullptr};
}  // namespace

void install_cuda_backend(const DeviceBackend* backend) {
  g_cuda_backend.store(backend);
}

const DeviceBackend* cuda_backend() {
  return g_cuda_backend.load();
}

const DeviceBackend& require_cuda_backend(const char* what) {
  const DeviceBackend* b = cuda_backend();
  if (!b) throw NotBuiltError(fmt::format("{}, but ftune was built without CUDA", what));
  return *b;
}

int cuda_device_count() {
  const DeviceBackend* b = cuda_backend();
  return b ? b->device_count() : 0;
}

}  // namespace ftune
