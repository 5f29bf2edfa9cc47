// cuda_kernels_bench's DeBERTa disentangled-attention part (bench/cuda_kernels_deberta.cc).
#pragma once

#include "core/device.h"

namespace ftune::bench_deberta {

// Checks, then times, at DeBERTa-v3-base shapes on `dev`; prints its lines and returns the number
// of failed checks (no timing after a failure).
int run(Device dev, bool gpu, int reps);

}  // namespace ftune::bench_deberta
