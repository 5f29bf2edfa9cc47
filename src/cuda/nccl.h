// NCCL, the collective library of the CUDA world, for data-parallel runs on GPUs (issue 20): the
// ranks' gradient buffers summed in place on each GPU's compute stream, stream-ordered with the
// backward that produced them (no host synchronisation). NCCL ships with the CUDA toolkit; it is
// loaded on first use (cuda/lazy_library.h, libnccl.so.<major>, FTUNE_NCCL_LIBRARY overrides), so a
// CPU run, or a GPU run of one rank, never needs it. Plain C++ (no NCCL or CUDA headers); the
// ranks exchange the communicator's id through MPI (train/process_group.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace ftune::cuda {

constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// NCCL's unique id (NCCL_UNIQUE_ID_BYTES) made by rank 0, for the others to join with. Throws
// DeviceError when NCCL is missing (its load error) or fails.
std::string nccl_unique_id();

class NcclComm {
 public:
  // Joins the communicator `id` of `size` ranks as `rank`, on `device` (collective: every rank
  // constructs it at the same time).
  NcclComm(const std::string& id, int rank, int size, Device device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // In-place sums over the ranks of device memory, queued on the device's compute stream.
  void sum(float* data, int64_t n);
  void sum(double* data, int64_t n);

 private:
  void* comm_ = nullptr;  // ncclComm_t
  Device device_;
};

}  // namespace ftune::cuda
