// The CUDA streams of a device: one compute stream, on which every kernel, cuBLASLt call and
// device-side copy of ftune runs in order, and one copy stream for host-to-device input staging.
// Both are created non-blocking on first use (per device, for the current device) and live for the
// process. Nothing runs on the legacy default stream, so a whole training step can be captured
// into a CUDA graph. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

namespace ftune::cuda {

cudaStream_t compute_stream();  // of the current device
cudaStream_t copy_stream();     // of the current device

}  // namespace ftune::cuda
