// CUDA graphs of the compute stream: capture what the host enqueues on it between begin and end
// into an executable graph, and launch that graph later in the stream's order. Plain C++ (handles
// are opaque), built only with FTUNE_CUDA. The training step's use of it (what is captured, keyed
// by what, replayed when) is train/step_graphs.h.
//
// Capture runs in cudaStreamCaptureModeThreadLocal: the capturing thread may not make unsafe
// calls (synchronous copies, cudaMalloc, synchronisation) — cuda::memcpy between host and device
// throws InternalError during a capture instead of invalidating it — while other threads (NVML
// sampler, data prefetch) are unaffected. Nothing executes during a capture: a captured region
// runs only when its graph is launched.
#pragma once

#include "core/device.h"

namespace ftune::cuda {

// Starts capturing the compute stream of `device`.
void graph_capture_begin(Device device);
// Ends the capture and instantiates it: returns the executable graph (cudaGraphExec_t). Throws
// DeviceError naming the CUDA error when the capture was invalidated (an unsupported call inside
// it) or instantiation failed; the stream is then no longer capturing and the error is cleared.
void* graph_capture_end(Device device);
// Ends a capture that is being abandoned (an exception inside the captured region) and discards
// it; never throws.
void graph_capture_abort(Device device) noexcept;
// Whether the compute stream of the current device is capturing.
bool compute_stream_capturing();
// Launches an executable graph on the compute stream of `device`.
void graph_launch(Device device, void* exec);
void graph_destroy(void* exec) noexcept;

}  // namespace ftune::cuda
