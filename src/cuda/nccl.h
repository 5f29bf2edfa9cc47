// NCCL, the collective library of the CUDA world, for data-parallel runs on GPUs (issue 20): the
// ranks' gradient buckets summed in place on a communication stream as backward makes each final
// (stream-ordered through events: no host synchronisation), and the step loss on the compute
// stream. NCCL ships with the CUDA toolkit; it is
// loaded on first use (cuda/lazy_library.h, libnccl.so.<major>, FTUNE_NCCL_LIBRARY overrides), so a
// CPU run, or a GPU run of one rank, never needs it. Plain C++ (no NCCL or CUDA headers); the
// ranks exchange the communicator's id through MPI (dist/process_group.h).
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

  // Overlap with backward: an in-place sum queued on the communication stream (created on first
  // use, higher priority than the compute stream) behind an event recorded on the compute stream
  // now, so it starts once the kernels queued so far (those that made these gradients final) have
  // run, while the compute stream goes on with the next ones.
  void sum_behind_compute(float* data, int64_t n);
  // The compute stream waits for everything queued on the communication stream (the optimizer
  // runs after every bucket's sum); the host does not wait.
  void join_compute();

 private:
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t: the communication stream
  void* ready_ = nullptr;   // cudaEvent_t recorded on the compute stream before each bucket
  void* done_ = nullptr;    // cudaEvent_t recorded on the communication stream by join_compute()
  Device device_;
};

}  // namespace ftune::cuda
