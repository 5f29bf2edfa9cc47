// Gradient norm on CUDA; mirrors optim/grad_clip_cpu.cc.
//   sum_of_squares: kPartialBlocks blocks each sum x^2 in double over a grid-stride slice of the
//     buffer and reduce it within the block (warp shuffles, then warps in order); a second
//     one-block kernel adds the partial sums (each thread a strided set of them in order, then the
//     block reduction) into one double. The launch shape
//     never changes, so the result is the same bits on every run. Partial sums and the result live
//     in a per-device scratch of (kPartialBlocks + 1) doubles allocated once (device_malloc) and
//     kept; sum_of_squares reads the single 8-byte result back (a synchronisation), while
//     sum_of_squares_into leaves it in device memory (the trainer's step scalars).
#include <array>
#include <mutex>
#include <string>

#include "core/memory.h"
#include "cuda/cuda_check.h"
#include "cuda/reduce.cuh"
#include "cuda/streams.cuh"
#include "optim/grad_clip.h"

namespace ftune::cuda {
namespace {

constexpr unsigned kPartialBlocks = 1024;
constexpr unsigned kThreads = 256;
constexpr int kMaxDevices = 64;

// (kPartialBlocks partial sums, then the result), per device, created on first use.
double* reduction_scratch() {
  static std::mutex mu;
  static std::array<double*, kMaxDevices> all{};
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("grad_sum_of_squares: CUDA device index " + std::to_string(device) +
                      " out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (!all[device])
    all[device] = static_cast<double*>(
        device_malloc(Device::cuda(device), (kPartialBlocks + 1) * sizeof(double)));
  return all[device];
}

__global__ void sum_of_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double shared[32];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double s = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    s += double(x[i]) * double(x[i]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// One block: thread t adds partials t, t + kThreads, ... in order, then the block's fixed-order
// reduction (reduce.cuh) adds the threads' sums: the same bits every run, without one thread
// walking all kPartialBlocks partials serially.
__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(double* result, const double* partial, int count) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int b = static_cast<int>(threadIdx.x); b < count; b += static_cast<int>(blockDim.x))
    s += partial[b];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *result = s;
}

}  // namespace

void sum_of_squares_into(double* result, const float* x, int64_t n) {
  if (n == 0) {
    FTUNE_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), compute_stream()));
    return;
  }
  double* scratch = reduction_scratch();
  sum_of_squares_partial_kernel<<<kPartialBlocks, kThreads, 0, compute_stream()>>>(scratch, x, n);
  FTUNE_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kThreads, 0, compute_stream()>>>(result, scratch, kPartialBlocks);
  FTUNE_CUDA_CHECK_LAUNCH();
}

double sum_of_squares(const float* x, int64_t n) {
  if (n == 0) return 0.0;
  double* scratch = reduction_scratch();
  sum_of_squares_into(scratch + kPartialBlocks, x, n);
  double total = 0.0;
  FTUNE_CUDA_CHECK(cudaMemcpyAsync(&total, scratch + kPartialBlocks, sizeof(double),
                                   cudaMemcpyDeviceToHost, compute_stream()));
  FTUNE_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  return total;
}

}  // namespace ftune::cuda
