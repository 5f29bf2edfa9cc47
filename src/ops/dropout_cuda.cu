// Dropout on CUDA: one thread per four consecutive elements, the same Philox stream and the same
// stream index map (ops/dropout.h) as the CPU. When a sequence's run and stride are multiples of
// four (the usual case) a thread's four elements are one Philox block and it evaluates Philox
// once; otherwise it evaluates it again where the stream group changes.
#include "cuda/cuda_check.h"
#include "cuda/streams.cuh"
#include "ops/dropout.h"

namespace ftune::cuda {
namespace {

__global__ void dropout_kernel(float* out, const float* inp, int64_t n, float p, float scale,
                               RngKey rng, DropoutRuns runs) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g * 4 >= n) return;
  Philox4 r{};
  uint64_t group = ~0ull;
  for (int k = 0; k < 4; ++k) {
    const int64_t i = g * 4 + k;
    if (i >= n) break;
    const uint64_t s = dropout_stream_index(runs, i);
    if ((s >> 2) != group) {
      group = s >> 2;
      r = philox_block(rng, group);
    }
    out[i] = philox_uniform(r.v[s & 3]) >= p ? inp[i] * scale : 0.0f;
  }
}

}  // namespace

void dropout_apply(float* out, const float* inp, int64_t n, float p, RngKey rng, DropoutRuns runs) {
  if (n == 0) return;
  if (p == 0.0f) {
    if (out != inp)
      FTUNE_CUDA_CHECK(cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  const int64_t groups = (n + 3) / 4;
  dropout_kernel<<<grid_for(groups, 256), 256, 0, compute_stream()>>>(out, inp, n, p, 1.0f / (1.0f - p), rng, runs);
  FTUNE_CUDA_CHECK_LAUNCH();
}

}  // namespace ftune::cuda
