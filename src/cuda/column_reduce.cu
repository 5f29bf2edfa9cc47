// The column reduction's per-device scratch (partials and results) and its plain column sums
// (see column_reduce.cuh).
#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <type_traits>

#include "core/memory.h"
#include "cuda/column_reduce.cuh"

namespace ftune::cuda {
namespace {

constexpr int kMaxDevices = 64;

// One allocation per device: the partials, then the results. Created under the mutex, then read
// without it (a column reduction runs ~100 times a step).
float* column_scratch() {
  static std::mutex mu;
  static std::array<std::atomic<float*>, kMaxDevices> all{};
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("column_reduce: CUDA device index " + std::to_string(device) +
                      " out of range");
  if (float* p = all[device].load(std::memory_order_acquire)) return p;
  std::lock_guard<std::mutex> lock(mu);
  if (float* p = all[device].load(std::memory_order_relaxed)) return p;
  float* p = static_cast<float*>(device_malloc(
      Device::cuda(device),
      static_cast<size_t>(kColumnPartialFloats + kColumnResultFloats) * sizeof(float)));
  all[device].store(p, std::memory_order_release);
  return p;
}

__global__ void add_kernel(float* out, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += x[i];
}

}  // namespace

float* column_partials() {
  return column_scratch();
}

float* column_results() {
  return column_scratch() + kColumnPartialFloats;
}

void add_column_results(float* out, int64_t n) {
  if (n <= 0) return;
  if (n > kColumnResultFloats)
    throw InternalError("add_column_results: " + std::to_string(n) + " values, the scratch holds " +
                        std::to_string(kColumnResultFloats));
  add_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(out, column_results(), n);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void column_sums(float* out, bool accumulate, const void* x, DType type, int64_t ld, int64_t rows,
                 int64_t cols) {
  with_float_type(type, const_cast<void*>(x), [&](auto* p) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    const ColumnElement<T> value{p, ld};
    if (accumulate)
      column_reduce<1>(rows, cols, value, ColumnAdd{out});
    else
      column_reduce<1>(rows, cols, value, ColumnStore{out});
  });
}

}  // namespace ftune::cuda
