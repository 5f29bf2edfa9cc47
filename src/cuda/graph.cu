// CUDA graph capture and launch on the compute stream (see graph.h).
#include "cuda/graph.h"

#include <string>

#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"

namespace ftune::cuda {
namespace {

void use(Device device) { FTUNE_CUDA_CHECK(cudaSetDevice(device.index)); }

}  // namespace

void graph_capture_begin(Device device) {
  use(device);
  FTUNE_CUDA_CHECK(cudaStreamBeginCapture(compute_stream(), cudaStreamCaptureModeThreadLocal));
}

void* graph_capture_end(Device device) {
  use(device);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(compute_stream(), &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    throw DeviceError(std::string("CUDA graph capture failed: ") + cudaGetErrorName(ended) + " (" +
                      cudaGetErrorString(ended) + ")");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceError(std::string("CUDA graph instantiation failed: ") + cudaGetErrorName(made) +
                      " (" + cudaGetErrorString(made) + ")");
  }
  return exec;
}

void graph_capture_abort(Device device) noexcept {
  if (cudaSetDevice(device.index) != cudaSuccess) return;
  // compute_stream() reports a failing cudaGetDevice by throwing: caught here, or this noexcept
  // function would terminate the process instead of letting the region's exception propagate.
  cudaStream_t stream = nullptr;
  try {
    stream = compute_stream();
  } catch (...) {
    (void)cudaGetLastError();
    return;
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
      status == cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return;
  }
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);  // an invalidated capture ends too (no graph)
  if (graph) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

bool compute_stream_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FTUNE_CUDA_CHECK(cudaStreamIsCapturing(compute_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

void graph_launch(Device device, void* exec) {
  use(device);
  FTUNE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), compute_stream()));
}

void graph_destroy(void* exec) noexcept {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

}  // namespace ftune::cuda
