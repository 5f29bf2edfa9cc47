// Installs the CUDA backend's device operations into core/ (core/device_backend.h) before main, so
// core/ reaches CUDA memory without including cuda/. The library's consumers link this object
// whatever they reference (CMake passes -u ftune_cuda_backend_anchor), so the installation cannot
// be dropped by the static linker.
#ifdef FTUNE_WITH_CUDA

#include "core/device_backend.h"
#include "cuda/cuda_device.h"

extern "C" {
// Referenced by the linker option that keeps this object in every binary.
int ftune_cuda_backend_anchor = 0;
}

namespace ftune::cuda {
namespace {

const DeviceBackend kBackend{
    &device_count, &malloc,      &free,          &memory_info,
    &memcpy,       &memset_zero, &fill_f32,      &synchronize,
    &timing_event_create,        &record_on_compute_stream, &event_elapsed_ms,
};

const bool kInstalled = [] {
  install_cuda_backend(&kBackend);
  return true;
}();

}  // namespace
}  // namespace ftune::cuda

#endif  // FTUNE_WITH_CUDA
