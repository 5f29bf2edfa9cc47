// CUDA device management: device selection, allocation, copies and fills, with checked calls.
#include <string>

#include <array>
#include <mutex>

#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "cuda/cuda_device.h"
#include "cuda/graph.h"

namespace ftune::cuda {
namespace {

void set_device(Device device) {
  FTUNE_CUDA_CHECK(cudaSetDevice(device.index));
}

__global__ void fill_f32_kernel(float* dst, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = value;
}

cudaMemcpyKind copy_kind(Device dst, Device src) {
  if (dst.is_cpu()) return src.is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost;
  return src.is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
}

// Non-blocking streams per device, created on first use and kept for the process.
constexpr int kMaxDevices = 64;
struct DeviceStreams {
  std::once_flag once;
  cudaStream_t compute = nullptr, copy = nullptr;
};
std::array<DeviceStreams, kMaxDevices> g_streams;

DeviceStreams& streams_of_current_device() {
  int device = 0;
  FTUNE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("cuda:" + std::to_string(device) + ": more devices than ftune supports (" +
                      std::to_string(kMaxDevices) + ")");
  DeviceStreams& s = g_streams[static_cast<size_t>(device)];
  std::call_once(s.once, [&s] {
    FTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    FTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
  });
  return s;
}

}  // namespace

cudaStream_t compute_stream() { return streams_of_current_device().compute; }
cudaStream_t copy_stream() { return streams_of_current_device().copy; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void* malloc(Device device, size_t bytes) {
  set_device(device);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemoryError("out of memory on cuda:" + std::to_string(device.index) +
                           ": requested " + std::to_string(bytes) + " bytes, " +
                           std::to_string(free_b) + " free of " + std::to_string(total_b));
  }
  FTUNE_CUDA_CHECK(err);
  return p;
}

void memory_info(Device device, size_t* free_bytes, size_t* total_bytes) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError("cudaHostAlloc: cannot pin " + std::to_string(bytes) +
                           " bytes of host memory");
  }
  FTUNE_CUDA_CHECK(err);
  return p;
}

void host_free_pinned(void* ptr) { FTUNE_CUDA_CHECK(cudaFreeHost(ptr)); }

void* event_create(Device device) {
  set_device(device);
  cudaEvent_t e = nullptr;
  FTUNE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void* timing_event_create(Device device) {
  set_device(device);
  cudaEvent_t e = nullptr;
  FTUNE_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  FTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start),
                                        static_cast<cudaEvent_t>(end)));
  return ms;
}

void event_destroy(void* event) { FTUNE_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }

void event_synchronize(void* event) {
  FTUNE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void copy_to_device_on_copy_stream(void* dst, Device device, const void* src, size_t bytes,
                                   void* after, void* done) {
  set_device(device);
  const cudaStream_t stream = copy_stream();
  if (after) FTUNE_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(after), 0));
  FTUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  if (done) FTUNE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(done), stream));
}

void compute_stream_wait(Device device, void* event) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), static_cast<cudaEvent_t>(event), 0));
}

void record_on_compute_stream(Device device, void* event) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), compute_stream()));
}

void synchronize_and_check(const std::string& what) {
  cudaError_t err = cudaStreamSynchronize(compute_stream());
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess)
    throw DeviceError(what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

void copy_on_compute_stream(void* dst, Device device, const void* src, size_t bytes) {
  set_device(device);
  FTUNE_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream()));
}

void copy_to_host_on_compute_stream(void* dst, Device device, const void* src, size_t bytes,
                                    void* done) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_stream()));
  FTUNE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(done), compute_stream()));
}

void free(Device device, void* ptr) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaFree(ptr));
}

void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (!dst_device.is_cpu())
    set_device(dst_device);
  else if (!src_device.is_cpu())
    set_device(src_device);
  // In order with the kernels on the compute stream. A copy from or to host memory returns when
  // it is done (host memory may be pageable) and so cannot be part of a CUDA graph (cuda/graph.h);
  // a device-to-device copy stays in stream order without the host waiting.
  const cudaStream_t stream = compute_stream();
  const bool host_side = dst_device.is_cpu() || src_device.is_cpu();
  if (host_side && compute_stream_capturing())
    throw InternalError("a " + std::to_string(bytes) + " byte " +
                        (dst_device.is_cpu() ? "device-to-host" : "host-to-device") +
                        " copy inside a CUDA graph capture (it would wait for the host); move it "
                        "before the captured region");
  FTUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, copy_kind(dst_device, src_device), stream));
  if (host_side) FTUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void memset_zero(void* dst, Device device, size_t bytes) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_stream()));
}

void fill_f32(float* dst, Device device, int64_t n, float value) {
  set_device(device);
  if (n == 0) return;
  fill_f32_kernel<<<grid_for(n, 256), 256, 0, compute_stream()>>>(dst, n, value);
  FTUNE_CUDA_CHECK_LAUNCH();
}

void use_device(Device device) { set_device(device); }

void synchronize(Device device) {
  set_device(device);
  FTUNE_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string device_description(Device device) {
  cudaDeviceProp prop{};
  FTUNE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  char text[320];
  snprintf(text, sizeof(text), "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
           prop.totalGlobalMem / double(1ull << 30));
  return text;
}

DeviceCapabilities device_capabilities(Device device) {
  cudaDeviceProp prop{};
  FTUNE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  DeviceCapabilities c;
  c.name = prop.name;
  c.major = prop.major;
  c.minor = prop.minor;
  c.sm_count = prop.multiProcessorCount;
  c.total_bytes = prop.totalGlobalMem;
  FTUNE_CUDA_CHECK(cudaDeviceGetAttribute(&c.clock_khz, cudaDevAttrClockRate, device.index));
  FTUNE_CUDA_CHECK(cudaDriverGetVersion(&c.driver_version));
  FTUNE_CUDA_CHECK(cudaRuntimeGetVersion(&c.runtime_version));
  c.bf16 = c.tf32 = prop.major >= 8;
  c.fp16 = prop.major >= 7;
  char bus_id[32] = {};
  FTUNE_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device.index));
  c.pci_bus_id = bus_id;
  return c;
}

}  // namespace ftune::cuda
