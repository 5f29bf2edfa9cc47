// NCCL loaded on first use (see nccl.h). Its entry points are forwarded to the library like
// cuBLASLt's (cuda/cublaslt_loader.cc); a missing library fails each call with ncclSystemError and
// the error names what could not be loaded.
#include "cuda/nccl.h"

#include <fmt/format.h>

#include "core/error.h"

#ifdef FTUNE_WITH_CUDA

#include <nccl.h>

#include "cuda/cuda_check.h"
#include "cuda/cuda_device.h"
#include "cuda/lazy_library.h"
#include "cuda/streams.cuh"

namespace ftune::cuda {

LazyLibrary& nccl_runtime() {
  static LazyLibrary lib(fmt::format("libnccl.so.{}", NCCL_MAJOR), "FTUNE_NCCL_LIBRARY");
  return lib;
}

}  // namespace ftune::cuda

#define FTUNE_NCCL(ret, name, params, args, fail) \
  FTUNE_LAZY_FORWARD(ftune::cuda::nccl_runtime(), ret, name, params, args, fail)

extern "C" {
FTUNE_NCCL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id), ncclSystemError)
FTUNE_NCCL(ncclResult_t, ncclCommInitRank,
           (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank),
           ncclSystemError)
FTUNE_NCCL(ncclResult_t, ncclAllReduce,
           (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
            ncclComm_t comm, cudaStream_t stream),
           (send, recv, count, type, op, comm, stream), ncclSystemError)
FTUNE_NCCL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm), ncclSystemError)
FTUNE_NCCL(const char*, ncclGetErrorString, (ncclResult_t r), (r), "NCCL is not loaded")
}

namespace ftune::cuda {
namespace {

static_assert(kNcclIdBytes == NCCL_UNIQUE_ID_BYTES);

void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  if (const auto missing = nccl_runtime().load_error())
    throw DeviceError(
        fmt::format("{}: NCCL could not be loaded ({}; FTUNE_NCCL_LIBRARY names "
                    "another file)",
                    what, *missing));
  throw DeviceError(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

}  // namespace

std::string nccl_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

NcclComm::NcclComm(const std::string& id, int rank, int size, Device device) : device_(device) {
  ncclUniqueId uid;
  FTUNE_ASSERT(id.size() == sizeof(uid.internal), "an NCCL id of {} bytes", id.size());
  std::copy(id.begin(), id.end(), uid.internal);
  use_device(device);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, uid, rank),
        fmt::format("ncclCommInitRank (rank {} of {} on {})", rank, size, device_name(device))
            .c_str());
  comm_ = comm;
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  if (ready_) cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
  if (done_) cudaEventDestroy(static_cast<cudaEvent_t>(done_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void NcclComm::sum(float* data, int64_t n) {
  use_device(device_);
  check(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum,
                      static_cast<ncclComm_t>(comm_), compute_stream()),
        "ncclAllReduce");
}

void NcclComm::sum(double* data, int64_t n) {
  use_device(device_);
  check(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat64, ncclSum,
                      static_cast<ncclComm_t>(comm_), compute_stream()),
        "ncclAllReduce");
}

void NcclComm::sum_behind_compute(float* data, int64_t n) {
  use_device(device_);
  if (!stream_) {
    // Communication ahead of compute when both are ready (what PyTorch's DDP does too): a bucket's
    // sum delays the next layer's backward little, and the last bucket ends sooner.
    int least = 0, greatest = 0;
    FTUNE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    cudaEvent_t ready = nullptr, done = nullptr;
    FTUNE_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    stream_ = s;
    FTUNE_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    ready_ = ready;
    FTUNE_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    done_ = done;
  }
  const auto stream = static_cast<cudaStream_t>(stream_);
  const auto ready = static_cast<cudaEvent_t>(ready_);
  // The wait takes the event as recorded now: recording it again for the next bucket is safe.
  FTUNE_CUDA_CHECK(cudaEventRecord(ready, compute_stream()));
  FTUNE_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
  check(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum,
                      static_cast<ncclComm_t>(comm_), stream),
        "ncclAllReduce");
}

void NcclComm::join_compute() {
  if (!stream_) return;  // nothing was started behind compute
  use_device(device_);
  const auto done = static_cast<cudaEvent_t>(done_);
  FTUNE_CUDA_CHECK(cudaEventRecord(done, static_cast<cudaStream_t>(stream_)));
  FTUNE_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), done, 0));
}

}  // namespace ftune::cuda

#else  // a build without CUDA: no GPU to reduce on

namespace ftune::cuda {

std::string nccl_unique_id() {
  throw DeviceError("this ftune was built without CUDA (no NCCL)");
}
NcclComm::NcclComm(const std::string&, int, int, Device device) : device_(device) {
  throw DeviceError("this ftune was built without CUDA (no NCCL)");
}
NcclComm::~NcclComm() = default;
void NcclComm::sum(float*, int64_t) {}
void NcclComm::sum(double*, int64_t) {}
void NcclComm::sum_behind_compute(float*, int64_t) {}
void NcclComm::join_compute() {}

}  // namespace ftune::cuda

#endif  // FTUNE_WITH_CUDA
